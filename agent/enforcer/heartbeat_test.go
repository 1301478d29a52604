package enforcer

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
)

// TestRunBeatsUntilTheApplyLockIsStuck: an idle Run keeps its heartbeat
// alive on its own; once something holds the apply lock (an apply that
// hangs, a Sync that never returns), Run cannot turn and the watchdog names
// it; when the lock is free again it recovers.
func TestRunBeatsUntilTheApplyLockIsStuck(t *testing.T) {
	const deadline = 400 * time.Millisecond
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	e := New(st, newSetDataplane(), nil)
	wd := watchdog.New()
	e.SetHeartbeat(wd.Register("enforcer", deadline))
	go e.Run(t.Context(), 0)

	watchdogtest.StaysAlive(t, wd, 3*deadline, "enforcer idle with nothing committed")
	e.mu.Lock()
	watchdogtest.ExpectStalled(t, wd, "enforcer", "the apply lock was held")
	e.mu.Unlock()
	watchdogtest.ExpectAlive(t, wd, "the apply lock is free again")
}
