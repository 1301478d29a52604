package watchdog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeClock drives a Watchdog's clock by hand.
type fakeClock struct{ now time.Duration }

func newFake() (*Watchdog, *fakeClock) {
	c := &fakeClock{}
	w := New()
	w.since = func(time.Time) time.Duration { return c.now }
	return w, c
}

func TestCheck(t *testing.T) {
	type beat struct {
		at   time.Duration
		loop string
	}
	tests := []struct {
		name  string
		beats []beat
		now   time.Duration
		// want are substrings of the error, none for a healthy watchdog.
		want    []string
		notWant []string
	}{
		{
			name:  "loops that beat within their deadline are healthy an hour on",
			beats: []beat{{20 * time.Minute, "enforcer"}, {40 * time.Minute, "routes"}, {58 * time.Minute, "enforcer"}, {59 * time.Minute, "routes"}},
			now:   time.Hour,
		},
		{name: "silent within the deadline", now: 2 * time.Minute},
		{name: "exactly at the deadline", now: 3 * time.Minute},
		{
			name: "silent past the deadline since registration",
			now:  3*time.Minute + time.Second,
			want: []string{"loop enforcer last turned 3m1s ago (deadline 3m0s)", "loop routes last turned 3m1s ago"},
		},
		{
			name:    "one loop beats, the other does not",
			beats:   []beat{{2 * time.Minute, "routes"}, {4 * time.Minute, "routes"}},
			now:     5 * time.Minute,
			want:    []string{"loop enforcer last turned 5m0s ago"},
			notWant: []string{"routes"},
		},
		{
			name:    "a beat after a stall heals it",
			beats:   []beat{{2 * time.Minute, "routes"}, {10 * time.Minute, "enforcer"}},
			now:     10*time.Minute + time.Second,
			want:    []string{"loop routes last turned 8m1s ago"},
			notWant: []string{"enforcer"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, clock := newFake()
			loops := map[string]*Loop{
				"enforcer": w.Register("enforcer", 3*time.Minute),
				"routes":   w.Register("routes", 3*time.Minute),
			}
			for _, b := range tt.beats {
				clock.now = b.at
				loops[b.loop].Beat()
			}
			clock.now = tt.now
			err := w.Check(t.Context())
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check() = nil, want an error naming %q", tt.want)
			}
			if !errors.Is(err, ErrStalled) {
				t.Errorf("Check() = %v, does not wrap ErrStalled", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Check() = %q, want it to contain %q", err, s)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Check() = %q, names %q, which beat in time", err, s)
				}
			}
		})
	}
}

func TestStopAndReRegister(t *testing.T) {
	w, clock := newFake()
	old := w.Register("controller", time.Minute)
	clock.now = 2 * time.Minute
	if w.Check(t.Context()) == nil {
		t.Fatal("a silent loop passed the check")
	}
	// A new term registers the loop again: the old registration, and its
	// silence, no longer count; stopping the old one must not remove the new.
	fresh := w.Register("controller", time.Minute)
	old.Stop()
	if err := w.Check(t.Context()); err != nil {
		t.Fatalf("after re-registering: %v", err)
	}
	if got := w.Loops(); len(got) != 1 || got[0].Name != "controller" {
		t.Fatalf("Loops() = %v, want the fresh controller only", got)
	}
	clock.now = 4 * time.Minute
	fresh.Stop()
	if err := w.Check(t.Context()); err != nil {
		t.Fatalf("a stopped loop is still checked: %v", err)
	}
	if got := w.Loops(); len(got) != 0 {
		t.Fatalf("Loops() = %v after Stop, want none", got)
	}
}

func TestNilLoop(t *testing.T) {
	var l *Loop
	l.Beat()
	l.Stop()
	select {
	case <-l.Tick():
		t.Fatal("a nil loop's Tick fired")
	case <-time.After(10 * time.Millisecond):
	}
}

func TestTickFiresWithinTheDeadline(t *testing.T) {
	w := New()
	l := w.Register("manifests", 40*time.Millisecond)
	defer l.Stop()
	start := time.Now()
	for range 3 {
		select {
		case <-l.Tick():
		case <-time.After(time.Second):
			t.Fatal("Tick did not fire within a second for a 40ms deadline")
		}
	}
	if d := time.Since(start); d > 40*time.Millisecond*3 {
		t.Errorf("3 ticks took %s; want them at least %d times per deadline", d, ticksPerDeadline)
	}
}
