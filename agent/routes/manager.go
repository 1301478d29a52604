package routes

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"lockstep.dev/lockstep/internal/backoff"
	"lockstep.dev/lockstep/internal/watchdog"
)

// Backoff bounds the wait before Manager retries a failed Apply.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Manager keeps the node's routes equal to the last set it was given: it
// applies each new set, retries failures with backoff, and re-applies
// every resync interval to repair routes someone deleted.
type Manager struct {
	log   *slog.Logger
	apply func([]Route) (Result, error)

	mu      sync.Mutex
	desired []Route
	set     bool // Set was called at least once
	wake    chan struct{}
	// heartbeat is beaten by every turn of Run.
	heartbeat *watchdog.Loop
}

// NewManager returns a Manager for the calling process's network
// namespace.
func NewManager(log *slog.Logger) *Manager {
	return &Manager{log: log, apply: Apply, wake: make(chan struct{}, 1)}
}

// Set replaces the desired routes. Until the first Set, Run changes
// nothing: routes left by a previous agent stay until the source has
// spoken, so a restart does not cut pods off from other nodes.
//
// Setting the routes already set does nothing: the kernel is compared on
// the next resync, not on every Node heartbeat.
func (m *Manager) Set(desired []Route) {
	m.mu.Lock()
	if m.set && slices.Equal(m.desired, desired) {
		m.mu.Unlock()
		return
	}
	m.desired, m.set = slices.Clone(desired), true
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// SetHeartbeat makes Run beat hb on every turn, and on hb's Tick when idle
// (without applying); call it before Run.
func (m *Manager) SetHeartbeat(hb *watchdog.Loop) { m.heartbeat = hb }

// Run applies the desired routes until ctx ends. Routes stay in place when
// it returns: an agent that restarts finds and adopts them.
func (m *Manager) Run(ctx context.Context, resync time.Duration) {
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	schedule := backoff.Backoff{First: minBackoff, Max: maxBackoff}
	var retry <-chan time.Time
	for {
		m.heartbeat.Beat()
		select {
		case <-ctx.Done():
			return
		case <-m.heartbeat.Tick():
			continue
		case <-m.wake:
		case <-ticker.C:
		case <-retry:
		}
		m.mu.Lock()
		desired, set := m.desired, m.set
		m.mu.Unlock()
		if !set {
			continue
		}
		res, err := m.apply(desired)
		m.report(res)
		if err != nil {
			wait := schedule.Next(time.Now())
			m.log.Error("program routes to other nodes; retrying", "err", err, "retry_in", wait)
			retry = time.After(wait)
			continue
		}
		schedule.Reset()
		retry = nil
	}
}

func (m *Manager) report(res Result) {
	for _, r := range res.Added {
		m.log.Info("route to node added", "dst", r.Dst, "via", r.Via, "node", r.Node)
	}
	for _, r := range res.Replaced {
		m.log.Info("route to node changed", "dst", r.Dst, "via", r.Via, "node", r.Node)
	}
	for _, r := range res.Removed {
		m.log.Info("route to node removed", "dst", r.Dst, "via", r.Via)
	}
	for _, r := range res.Conflicts {
		m.log.Warn("route to node not added: a route lockstep does not own has the destination; remove it to let lockstep route the block",
			"dst", r.Dst, "via", r.Via, "node", r.Node)
	}
}
