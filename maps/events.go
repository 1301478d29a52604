package maps

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// EventReader reads verdict events from the pinned lockstep_events ring
// buffer. While one is open, lockstep_state.monitor is set and the programs
// emit an event per drop and per newly allowed connection; Close clears it.
// Only one reader should run at a time: the first to close turns events off.
type EventReader struct {
	state *ebpf.Map
	rd    *ringbuf.Reader
}

// OpenEvents opens the event ring buffer pinned under pinRoot and turns
// event emission on.
func OpenEvents(pinRoot string) (*EventReader, error) {
	state, err := ebpf.LoadPinnedMap(filepath.Join(pinRoot, StateMap), nil)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (is the agent running with this --bpf-root?)", StateMap, err)
	}
	events, err := ebpf.LoadPinnedMap(filepath.Join(pinRoot, EventsMap), nil)
	if err != nil {
		state.Close()
		return nil, fmt.Errorf("open %s: %w", EventsMap, err)
	}
	rd, err := ringbuf.NewReader(events)
	events.Close()
	if err != nil {
		state.Close()
		return nil, fmt.Errorf("read %s: %w", EventsMap, err)
	}
	r := &EventReader{state: state, rd: rd}
	if err := r.setMonitor(1); err != nil {
		r.rd.Close()
		state.Close()
		return nil, err
	}
	return r, nil
}

// setMonitor writes the monitor flag, keeping gen. The read-modify-write
// can race with a generation flip; flips re-read the flag the same way, so
// the window is one syscall wide.
func (r *EventReader) setMonitor(v uint32) error {
	var st State
	if err := r.state.Lookup(uint32(0), &st); err != nil {
		return fmt.Errorf("read %s: %w", StateMap, err)
	}
	st.Monitor = v
	if err := r.state.Put(uint32(0), st); err != nil {
		return fmt.Errorf("set monitor flag: %w", err)
	}
	return nil
}

// Read blocks until the next event, the deadline, or Close. After Close
// it returns an error wrapping ringbuf.ErrClosed; after the deadline one
// wrapping os.ErrDeadlineExceeded.
func (r *EventReader) Read() (Event, error) {
	rec, err := r.rd.Read()
	if err != nil {
		return Event{}, err
	}
	return DecodeEvent(rec.RawSample)
}

// SetDeadline bounds how long Read blocks (zero: forever).
func (r *EventReader) SetDeadline(t time.Time) { r.rd.SetDeadline(t) }

// Close turns event emission off and releases the reader. It unblocks a
// pending Read.
func (r *EventReader) Close() error {
	err := r.setMonitor(0)
	return errors.Join(err, r.rd.Close(), r.state.Close())
}
