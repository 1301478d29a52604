package masquerade

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/internal/backoff"
)

// Backoff bounds the wait before Manager retries a failed Sync.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Manager keeps one iptables mode's masquerade rules equal to the last
// Config it was given: it syncs each new one, retries failures with
// backoff, and syncs again every resync interval to repair drift.
type Manager struct {
	run  iptables.Runner
	mode iptables.Mode
	log  *slog.Logger

	mu      sync.Mutex
	desired Config
	wake    chan struct{}

	syncMu sync.Mutex // one Sync at a time
}

// NewManager returns a Manager for mode m, running its commands with r.
// Until the first Set it masquerades nothing.
func NewManager(r iptables.Runner, m iptables.Mode, log *slog.Logger) *Manager {
	return &Manager{run: r, mode: m, log: log, wake: make(chan struct{}, 1)}
}

// Mode returns the iptables mode the Manager writes.
func (m *Manager) Mode() iptables.Mode { return m.mode }

// Set replaces the desired Config and reports whether it differs from the
// one before; only then does it wake Run.
func (m *Manager) Set(c Config) bool {
	c = c.Normalize()
	m.mu.Lock()
	changed := !c.Equal(m.desired)
	m.desired = c
	m.mu.Unlock()
	if changed {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return changed
}

// Sync applies the desired Config now, for a caller that must know the
// rules are in place before it goes on (the agent at start, or before it
// routes a new block).
func (m *Manager) Sync(ctx context.Context) error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.mu.Lock()
	c := m.desired
	m.mu.Unlock()
	changes, err := Sync(ctx, m.run, m.mode, c)
	for _, ch := range changes {
		m.log.Info("masquerade rules "+ch.Action, "family", ch.Family.String(), "mode", m.mode.String(), "rules", ch.Rules)
	}
	return err
}

// Run syncs until ctx ends: on every change Set reports, every resync,
// and after a failure with backoff. The rules stay when it returns: an
// agent that restarts finds them in place.
func (m *Manager) Run(ctx context.Context, resync time.Duration) {
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	schedule := backoff.Backoff{First: minBackoff, Max: maxBackoff}
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-ticker.C:
		case <-retry:
		}
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := schedule.Next(time.Now())
			m.log.Error("program masquerade rules; retrying", "err", err, "retry_in", wait)
			retry = time.After(wait)
			continue
		}
		schedule.Reset()
		retry = nil
	}
}
