package bpfmaps

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// EventReader reads verdict events from the pinned lockstep_events ring
// buffer. While one is open, lockstep_monitor is set and the programs emit
// an event per drop and per newly allowed connection; Close clears it.
// Only one reader should run at a time: the first to close turns events off.
type EventReader struct {
	monitor *ebpf.Map
	rd      *ringbuf.Reader
}

// OpenEvents opens the event ring buffer pinned under pinRoot and turns
// event emission on.
func OpenEvents(pinRoot string) (*EventReader, error) {
	monitor, err := ebpf.LoadPinnedMap(filepath.Join(pinRoot, MonitorMap), nil)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (is the agent running with this --bpf-root, and as recent as this lockstep?)", MonitorMap, err)
	}
	events, err := ebpf.LoadPinnedMap(filepath.Join(pinRoot, EventsMap), nil)
	if err != nil {
		monitor.Close()
		return nil, fmt.Errorf("open %s: %w", EventsMap, err)
	}
	rd, err := ringbuf.NewReader(events)
	events.Close()
	if err != nil {
		monitor.Close()
		return nil, fmt.Errorf("read %s: %w", EventsMap, err)
	}
	r := &EventReader{monitor: monitor, rd: rd}
	if err := r.setMonitor(1); err != nil {
		r.rd.Close()
		monitor.Close()
		return nil, err
	}
	return r, nil
}

// setMonitor writes the monitor flag: one write of a map no one else
// writes, so it cannot undo a generation flip.
func (r *EventReader) setMonitor(v uint32) error {
	if err := r.monitor.Put(uint32(0), v); err != nil {
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
	return errors.Join(err, r.rd.Close(), r.monitor.Close())
}
