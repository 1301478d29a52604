package watchdog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ticksPerDeadline is how many times per deadline an idle loop's Tick fires:
// a loop can miss three ticks (a long turn) before it misses its deadline.
const ticksPerDeadline = 4

// Watchdog keeps the loops registered with it and reports those that missed
// their deadline. Its methods are safe for concurrent use.
type Watchdog struct {
	// base anchors beats on the monotonic clock: a beat is stored as the
	// time since base.
	base time.Time
	// since returns the time since base; tests replace it.
	since func(time.Time) time.Duration

	mu    sync.Mutex
	loops map[string]*Loop
}

// New returns a Watchdog with no loops.
func New() *Watchdog {
	return &Watchdog{base: time.Now(), since: time.Since, loops: map[string]*Loop{}}
}

// Loop is one registered loop. Its methods may be called on a nil *Loop,
// and then do nothing.
type Loop struct {
	w        *Watchdog
	name     string
	deadline time.Duration
	ticker   *time.Ticker
	// last is the time of the last beat, as time since w.base.
	last atomic.Int64
}

// Register adds a loop named name that must beat at least once every
// deadline, counting from now. Registering a name again replaces the
// earlier loop (a loop restarted under the same name). deadline must be
// positive.
func (w *Watchdog) Register(name string, deadline time.Duration) *Loop {
	if deadline <= 0 {
		panic(fmt.Sprintf("watchdog: loop %s registered with deadline %s", name, deadline))
	}
	l := &Loop{w: w, name: name, deadline: deadline, ticker: time.NewTicker(deadline / ticksPerDeadline)}
	l.Beat()
	w.mu.Lock()
	if old := w.loops[name]; old != nil {
		old.ticker.Stop()
	}
	w.loops[name] = l
	w.mu.Unlock()
	return l
}

// Beat records that the loop turned now.
func (l *Loop) Beat() {
	if l == nil {
		return
	}
	l.last.Store(int64(l.w.since(l.w.base)))
}

// Tick fires at least ticksPerDeadline times per deadline: an idle loop
// selects on it to turn, and beat, while it waits. A nil Loop's Tick is a
// nil channel, which never fires.
func (l *Loop) Tick() <-chan time.Time {
	if l == nil {
		return nil
	}
	return l.ticker.C
}

// Stop unregisters the loop: it ended on purpose (its context ended) and
// is not to be waited for.
func (l *Loop) Stop() {
	if l == nil {
		return
	}
	l.ticker.Stop()
	l.w.mu.Lock()
	if l.w.loops[l.name] == l {
		delete(l.w.loops, l.name)
	}
	l.w.mu.Unlock()
}

// Status is what Loops reports about one loop.
type Status struct {
	Name string
	// Silent is how long ago the loop last beat.
	Silent   time.Duration
	Deadline time.Duration
}

// Stalled reports whether the loop missed its deadline.
func (s Status) Stalled() bool { return s.Silent > s.Deadline }

// String says what a probe's reader needs: which loop, how long silent,
// and against which deadline.
func (s Status) String() string {
	silent := s.Silent.Round(time.Second)
	if s.Silent < 10*time.Second {
		silent = s.Silent.Round(time.Millisecond)
	}
	return fmt.Sprintf("loop %s last turned %s ago (deadline %s)", s.Name, silent, s.Deadline)
}

// Loops returns the status of every registered loop, by name.
func (w *Watchdog) Loops() []Status {
	now := w.since(w.base)
	w.mu.Lock()
	out := make([]Status, 0, len(w.loops))
	for _, l := range w.loops {
		out = append(out, Status{Name: l.name, Silent: now - time.Duration(l.last.Load()), Deadline: l.deadline})
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ErrStalled is wrapped by Check's error.
var ErrStalled = errors.New("stalled")

// Check returns nil when every loop beat within its deadline, and otherwise
// an error naming each loop that did not and how long it has been silent.
// It has the signature of a health check; ctx is not used.
func (w *Watchdog) Check(context.Context) error {
	var stalled []string
	for _, s := range w.Loops() {
		if s.Stalled() {
			stalled = append(stalled, s.String())
		}
	}
	if len(stalled) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", strings.Join(stalled, "; "), ErrStalled)
}
