package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/backoff"
	"lockstep.dev/lockstep/internal/watchdog"
)

// Cleaner removes what lockstep left in one backend.
type Cleaner interface {
	// Clean removes every rule, set, program and map lockstep left in the
	// backend, with that backend's own tools. It must be idempotent (safe
	// after a half-done attempt) and return nil only when nothing is left.
	Clean(ctx context.Context) error
}

// CleanerFunc adapts a function to Cleaner.
type CleanerFunc func(ctx context.Context) error

// Clean calls f.
func (f CleanerFunc) Clean(ctx context.Context) error { return f(ctx) }

// ErrNoCleaner: a clean-up is pending for a backend this agent cannot
// clean (e.g. recorded by a newer version). The record stays.
var ErrNoCleaner = errors.New("no cleaner for this backend")

// Backoff bounds between attempts of one clean-up.
const (
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 2 * time.Minute
)

// Manager schedules and retries clean-ups. Its methods are safe for
// concurrent use.
type Manager struct {
	st       *store.Store
	db       *persist.DB
	cleaners map[string]Cleaner
	log      *slog.Logger

	// MinBackoff and MaxBackoff bound the wait after a failed attempt; it
	// doubles with every failure.
	MinBackoff, MaxBackoff time.Duration
	now                    func() time.Time

	mu       sync.Mutex // serialises attempts
	attempts map[string]*Attempts
	// heartbeat is beaten by every turn of Run.
	heartbeat *watchdog.Loop
}

// Attempts counts the clean-up attempts of one backend since the agent
// started.
type Attempts struct {
	Succeeded, Failed uint64
}

// New returns a Manager writing to st and db, cleaning the backends of
// cleaners (keyed by store.Cleanup.Backend).
func New(st *store.Store, db *persist.DB, cleaners map[string]Cleaner, log *slog.Logger) *Manager {
	if !st.Durable() {
		// A programming error: clean-ups recorded in memory only would be
		// forgotten by a restart, the very race they exist to close.
		panic("cleanup.New: the store is not durable (use store.NewDurable with the state file)")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Manager{
		st: st, db: db, cleaners: cleaners, log: log,
		MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff,
		now: time.Now, attempts: map[string]*Attempts{},
	}
}

// Restore puts the clean-ups the state file holds back into the store. Call
// it once at start, before Schedule.
func (m *Manager) Restore() error {
	pending, err := m.db.LoadCleanups()
	if err != nil {
		return err
	}
	txn := m.st.RestoreTxn()
	defer txn.Abort()
	for _, c := range pending {
		if err := store.UpsertCleanup(txn, c); err != nil {
			return err
		}
	}
	return txn.Commit()
}

// Schedule records, durably, that backend must be cleaned. Scheduling a
// backend that is already pending keeps its history.
func (m *Manager) Schedule(backend, reason string) error {
	txn := m.st.WriteTxn()
	defer txn.Abort()
	old, err := store.CleanupByBackend(txn, nil, backend)
	if err != nil || old != nil {
		return err
	}
	if err := store.UpsertCleanup(txn, &store.Cleanup{Backend: backend, Reason: reason, Since: m.now()}); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("schedule clean-up of %s: %w", backend, err)
	}
	m.log.Warn("scheduled clean-up of a dataplane backend lockstep no longer uses", "backend", backend, "reason", reason)
	return nil
}

// Pending returns the clean-ups not finished yet, ordered by backend.
func (m *Manager) Pending() []*store.Cleanup {
	all, _ := store.Cleanups(m.st.ReadTxn(), nil)
	return all
}

// AttemptCounts returns the attempts per backend since start.
func (m *Manager) AttemptCounts() map[string]Attempts {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Attempts, len(m.attempts))
	for b, a := range m.attempts {
		out[b] = *a
	}
	return out
}

// backoff is the wait after the attempts-th failure.
func (m *Manager) backoff(attempts int) time.Duration {
	schedule := backoff.Backoff{First: m.MinBackoff, Max: m.MaxBackoff}
	return schedule.After(attempts)
}

// RunOnce attempts every clean-up that is due and returns how long until
// the next one is due (0 when none is pending). A failed attempt is not an
// error of RunOnce: it is recorded on the clean-up's row. RunOnce fails
// only when it cannot record an outcome.
func (m *Manager) RunOnce(ctx context.Context) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Duration
	var errs []error
	for _, c := range m.Pending() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		due := c.LastAttempt.Add(m.backoff(c.Attempts))
		if wait := due.Sub(m.now()); c.Attempts > 0 && wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if err := m.attempt(ctx, c); err != nil {
			errs = append(errs, err)
		}
		if left, _ := store.CleanupByBackend(m.st.ReadTxn(), nil, c.Backend); left != nil {
			if wait := m.backoff(left.Attempts); next == 0 || wait < next {
				next = wait
			}
		}
	}
	return next, errors.Join(errs...)
}

// attempt runs c's cleaner once and records the outcome.
func (m *Manager) attempt(ctx context.Context, c *store.Cleanup) error {
	cleaner, ok := m.cleaners[c.Backend]
	var err error
	if !ok {
		err = fmt.Errorf("clean up %s: %w", c.Backend, ErrNoCleaner)
	} else {
		err = cleaner.Clean(ctx)
	}
	if ctx.Err() != nil {
		// An attempt cut short by shutdown is neither a success nor the
		// backend's failure.
		return nil
	}
	a := m.attempts[c.Backend]
	if a == nil {
		a = &Attempts{}
		m.attempts[c.Backend] = a
	}
	txn := m.st.WriteTxn()
	defer txn.Abort()
	cur, lerr := store.CleanupByBackend(txn, nil, c.Backend)
	if lerr != nil || cur == nil {
		return lerr
	}
	if err == nil {
		a.Succeeded++
		if err := store.DeleteCleanup(txn, c.Backend); err != nil {
			return err
		}
		m.log.Info("dataplane backend cleaned up", "backend", c.Backend, "attempts", cur.Attempts+1, "pending since", cur.Since)
	} else {
		a.Failed++
		next := *cur
		next.Attempts++
		next.LastError = err.Error()
		next.LastAttempt = m.now()
		if err := store.UpsertCleanup(txn, &next); err != nil {
			return err
		}
		m.log.Error("clean up dataplane backend; will retry", "backend", c.Backend, "attempt", next.Attempts,
			"retry in", m.backoff(next.Attempts), "err", err)
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("record clean-up of %s: %w", c.Backend, err)
	}
	return nil
}

// SetHeartbeat makes Run beat hb on every turn, and turn on hb's Tick when
// idle (an attempt not due yet is not made); call it before Run.
func (m *Manager) SetHeartbeat(hb *watchdog.Loop) { m.heartbeat = hb }

// Run retries pending clean-ups until none is left or ctx ends; it wakes
// early when a new one is scheduled.
func (m *Manager) Run(ctx context.Context) {
	for {
		m.heartbeat.Beat()
		ws := memdb.NewWatchSet()
		_, _ = store.Cleanups(m.st.ReadTxn(), ws)
		next, err := m.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			m.log.Error("record clean-up outcome", "err", err)
			next = max(next, m.MinBackoff)
		}
		var timer *time.Timer
		var fired <-chan time.Time
		if next > 0 {
			timer = time.NewTimer(next)
			fired = timer.C
		}
		select {
		case <-ctx.Done():
		case <-ws.WatchCh(ctx):
		case <-fired:
		case <-m.heartbeat.Tick():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Backends returns the backends m has cleaners for, sorted.
func (m *Manager) Backends() []string {
	out := make([]string, 0, len(m.cleaners))
	for b := range m.cleaners {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}
