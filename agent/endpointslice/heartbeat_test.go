package endpointslice

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
)

// TestRunBeatsUntilTheStoreIsStuck: an idle controller keeps its heartbeat
// alive; one that cannot get the store's write transaction (someone holds
// it and never commits) stops turning and the watchdog names it; it
// recovers once the transaction ends.
func TestRunBeatsUntilTheStoreIsStuck(t *testing.T) {
	// Longer than the other loops' tests use: a sync is a write
	// transaction, and on two busy cores (packages tested in parallel) a
	// turn was once late by 40 ms at 400 ms.
	const deadline = time.Second
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	c := New(st, nil)
	wd := watchdog.New()
	c.SetHeartbeat(wd.Register("endpointslice", deadline))
	go c.Run(t.Context())

	watchdogtest.StaysAlive(t, wd, 3*deadline, "controller idle with nothing committed")
	txn := st.WriteTxn()
	watchdogtest.ExpectStalled(t, wd, "endpointslice", "the store's write transaction was held")
	txn.Abort()
	watchdogtest.ExpectAlive(t, wd, "the write transaction ended")
}
