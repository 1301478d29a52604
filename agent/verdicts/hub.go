package verdicts

import (
	"errors"
	"log/slog"
	"sync"

	"lockstep.dev/lockstep/bpfmaps"
)

// Reader is an open stream of raw events; opening one turns emission on
// and closing it turns emission off (bpfmaps.EventReader).
type Reader interface {
	// Read blocks until the next event or Close, after which it returns
	// an error.
	Read() (bpfmaps.Event, error)
	Close() error
}

// SubscriberBuffer is how many events a subscriber may fall behind by;
// beyond it its events are dropped (and counted), so that a slow monitor
// never holds up the others.
const SubscriberBuffer = 4096

// Hub hands every event of one Reader to every subscriber, and keeps the
// Reader open exactly while it has any.
type Hub struct {
	open func() (Reader, error)
	log  *slog.Logger

	mu   sync.Mutex
	subs map[*Subscription]struct{}
	rd   Reader
	done chan struct{} // closed when the current reader's loop ends
	// stopped: Stop was called; Subscribe refuses.
	stopped bool
	// skipped counts the records that did not decode (bpfmaps.ErrBadEvent),
	// which are skipped; warned says the first was logged.
	skipped uint64
	warned  bool
}

// ErrStopped is returned by Subscribe after Stop.
var ErrStopped = errors.New("the agent is stopping: it reads no more verdict events")

// NewHub returns a hub whose reader open opens.
func NewHub(open func() (Reader, error), log *slog.Logger) *Hub {
	return &Hub{open: open, log: log, subs: map[*Subscription]struct{}{}}
}

// Subscription is one subscriber's events.
type Subscription struct {
	h *Hub
	// C delivers the events; it is closed when the subscription ends
	// (Close, or the reader failed).
	C       chan bpfmaps.Event
	mu      sync.Mutex
	closed  bool
	dropped uint64
}

// Subscribe adds a subscriber, opening the reader (turning emission on)
// if it is the first.
func (h *Hub) Subscribe() (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrStopped
	}
	if h.rd == nil {
		rd, err := h.open()
		if err != nil {
			return nil, err
		}
		h.rd, h.done = rd, make(chan struct{})
		go h.loop(rd, h.done)
	}
	s := &Subscription{h: h, C: make(chan bpfmaps.Event, SubscriberBuffer)}
	h.subs[s] = struct{}{}
	return s, nil
}

// Subscribers returns how many subscribers listen.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Skipped returns how many records did not decode and were skipped.
func (h *Hub) Skipped() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.skipped
}

// Stop ends every subscription and closes the reader, which turns
// emission off, and waits for its loop to end; Subscribe then refuses.
// The agent stops its hub before it exits, so that it never leaves the
// programs emitting for no one.
func (h *Hub) Stop() {
	h.mu.Lock()
	h.stopped = true
	for s := range h.subs {
		s.end()
	}
	clear(h.subs)
	done := h.closeReader()
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// closeReader closes the reader, which turns emission off, and returns
// the channel its loop closes when it ends (nil when none was open).
// Called with h.mu held, so that a Subscribe cannot open the next reader
// (emission on) before this one turned emission off.
func (h *Hub) closeReader() chan struct{} {
	if h.rd == nil {
		return nil
	}
	if err := h.rd.Close(); err != nil {
		h.log.Warn("close the verdict event reader", "err", err)
	}
	done := h.done
	h.rd, h.done = nil, nil
	return done
}

// Dropped returns how many events s missed because it fell behind.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close ends the subscription; the last one closes the reader, which
// turns emission off, and waits for its loop to end.
func (s *Subscription) Close() {
	h := s.h
	h.mu.Lock()
	if _, ok := h.subs[s]; !ok {
		h.mu.Unlock()
		return
	}
	delete(h.subs, s)
	s.end()
	var done chan struct{}
	if len(h.subs) == 0 {
		done = h.closeReader()
	}
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// end closes C once.
func (s *Subscription) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.C)
	}
}

// deliver hands ev to s without blocking.
func (s *Subscription) deliver(ev bpfmaps.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.C <- ev:
	default:
		s.dropped++
	}
}

// loop reads rd until it is closed, handing each event to every
// subscriber. A record that does not decode is skipped and counted; a
// reader that fails otherwise ends every subscription.
func (h *Hub) loop(rd Reader, done chan struct{}) {
	defer close(done)
	for {
		ev, err := rd.Read()
		if errors.Is(err, bpfmaps.ErrBadEvent) {
			h.skip(err)
			continue
		}
		if err != nil {
			h.mu.Lock()
			current := h.rd == rd
			if current {
				h.rd, h.done = nil, nil
				// Closed under h.mu: a Stop that finds no reader
				// must find emission off already.
				rd.Close()
			}
			var subs []*Subscription
			if current {
				for s := range h.subs {
					subs = append(subs, s)
				}
				clear(h.subs)
			}
			h.mu.Unlock()
			if current {
				// Not closed by the last subscriber: it broke.
				h.log.Warn("read verdict events; monitors disconnected", "err", err)
				for _, s := range subs {
					s.end()
				}
			}
			return
		}
		h.mu.Lock()
		for s := range h.subs {
			s.deliver(ev)
		}
		h.mu.Unlock()
	}
}

// skip counts a record that did not decode, and logs the first.
func (h *Hub) skip(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.skipped++
	if !h.warned {
		h.warned = true
		h.log.Warn("skipping verdict event records that do not decode (written by programs of another lockstep version?); monitors stay connected", "err", err)
	}
}

// ErrNoEvents says the dataplane has no verdict events (iptables, HNS).
var ErrNoEvents = errors.New("this dataplane reports no verdict events (only the eBPF one does)")
