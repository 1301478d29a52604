package verdicts

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/bpfmaps"
)

// fakeReader stands for the ring buffer: events pushed into it are read
// in order; open tracks whether emission is on.
type fakeReader struct {
	events chan bpfmaps.Event
	closed chan struct{}
	once   sync.Once
	src    *fakeSource
}

type fakeSource struct {
	mu     sync.Mutex
	opens  int
	on     bool
	reader *fakeReader
}

func (s *fakeSource) open() (Reader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		return nil, errors.New("two readers open at once")
	}
	s.opens++
	s.on = true
	s.reader = &fakeReader{events: make(chan bpfmaps.Event, 16), closed: make(chan struct{}), src: s}
	return s.reader, nil
}

func (s *fakeSource) emitting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on
}

// undecodable, as an event's Ifindex, makes fakeReader.Read fail as a
// record of the old 48-byte layout does.
const undecodable = ^uint32(0)

func (r *fakeReader) Read() (bpfmaps.Event, error) {
	select {
	case ev := <-r.events:
		if ev.Ifindex == undecodable {
			return bpfmaps.DecodeEvent(make([]byte, 48))
		}
		return ev, nil
	case <-r.closed:
		return bpfmaps.Event{}, errors.New("closed")
	}
}

func (r *fakeReader) Close() error {
	r.once.Do(func() {
		r.src.mu.Lock()
		r.src.on = false
		r.src.mu.Unlock()
		close(r.closed)
	})
	return nil
}

func recv(t *testing.T, s *Subscription) bpfmaps.Event {
	t.Helper()
	select {
	case ev, ok := <-s.C:
		if !ok {
			t.Fatal("subscription ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return bpfmaps.Event{}
}

// Every subscriber gets every event; emission is on from the first
// subscriber to the last, and a new first subscriber turns it on again.
func TestHubFansOutAndEmitsWhileSubscribed(t *testing.T) {
	src := &fakeSource{}
	h := NewHub(src.open, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if src.emitting() {
		t.Fatal("emitting before any subscriber")
	}
	a, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if !src.emitting() || src.opens != 1 {
		t.Fatalf("after two subscribers: emitting %v, opens %d; want true, 1", src.emitting(), src.opens)
	}
	for i := range 3 {
		src.reader.events <- bpfmaps.Event{Ifindex: uint32(i + 1)}
	}
	for _, s := range []*Subscription{a, b} {
		for i := range 3 {
			if ev := recv(t, s); ev.Ifindex != uint32(i+1) {
				t.Errorf("event %d: ifindex %d, want %d", i, ev.Ifindex, i+1)
			}
		}
	}
	a.Close()
	if !src.emitting() {
		t.Error("emission off while a subscriber remains")
	}
	src.reader.events <- bpfmaps.Event{Ifindex: 9}
	if ev := recv(t, b); ev.Ifindex != 9 {
		t.Errorf("remaining subscriber got ifindex %d, want 9", ev.Ifindex)
	}
	b.Close()
	if src.emitting() {
		t.Error("emission on after the last subscriber left")
	}
	if h.Subscribers() != 0 {
		t.Errorf("%d subscribers after both left", h.Subscribers())
	}
	c, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !src.emitting() || src.opens != 2 {
		t.Errorf("a new subscriber: emitting %v, opens %d; want true, 2", src.emitting(), src.opens)
	}
}

// A subscriber that does not read loses its own events, counted, and
// holds up nobody.
func TestHubSlowSubscriberDropsItsOwn(t *testing.T) {
	src := &fakeSource{}
	h := NewHub(src.open, slog.New(slog.NewTextHandler(io.Discard, nil)))
	slow, _ := h.Subscribe()
	defer slow.Close()
	fast, _ := h.Subscribe()
	defer fast.Close()
	n := SubscriberBuffer + 10
	for i := range n + 1 { // the last one: all before it reached both
		src.reader.events <- bpfmaps.Event{Ifindex: uint32(i)}
		if ev := recv(t, fast); ev.Ifindex != uint32(i) {
			t.Fatalf("fast subscriber: event %d has ifindex %d", i, ev.Ifindex)
		}
	}
	// The slow one's buffer took the first SubscriberBuffer; of the last
	// event, it may not have been offered yet.
	if got := slow.Dropped(); got != 10 && got != 11 {
		t.Errorf("slow subscriber dropped %d, want 10 (11 with the last)", got)
	}
	if got := fast.Dropped(); got != 0 {
		t.Errorf("fast subscriber dropped %d, want 0", got)
	}
}

// A record that does not decode (the layout before the rule id, 48
// bytes) is skipped and counted; the subscribers stay and get the events
// after it.
func TestHubSkipsUndecodableRecords(t *testing.T) {
	src := &fakeSource{}
	h := NewHub(src.open, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src.reader.events <- bpfmaps.Event{Ifindex: undecodable}
	src.reader.events <- bpfmaps.Event{Ifindex: undecodable}
	src.reader.events <- bpfmaps.Event{Ifindex: 5}
	if ev := recv(t, s); ev.Ifindex != 5 {
		t.Errorf("event after the bad records: ifindex %d, want 5", ev.Ifindex)
	}
	if got := h.Skipped(); got != 2 {
		t.Errorf("skipped %d records, want 2", got)
	}
	if h.Subscribers() != 1 || !src.emitting() {
		t.Errorf("after bad records: %d subscribers, emitting %v; want 1, true", h.Subscribers(), src.emitting())
	}
}

// Stop ends every subscription, turns emission off, and refuses the
// subscribers that come after.
func TestHubStop(t *testing.T) {
	src := &fakeSource{}
	h := NewHub(src.open, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, _ := h.Subscribe()
	b, _ := h.Subscribe()
	h.Stop()
	for name, s := range map[string]*Subscription{"first": a, "second": b} {
		select {
		case _, ok := <-s.C:
			if ok {
				t.Errorf("%s subscription delivered an event after Stop", name)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s subscription still open after Stop", name)
		}
		s.Close() // the stream's deferred Close: harmless
	}
	if src.emitting() {
		t.Error("emission on after Stop")
	}
	if _, err := h.Subscribe(); !errors.Is(err, ErrStopped) {
		t.Errorf("Subscribe after Stop: %v, want ErrStopped", err)
	}
	if src.emitting() || src.opens != 1 {
		t.Errorf("after a refused Subscribe: emitting %v, opens %d; want false, 1", src.emitting(), src.opens)
	}
}
