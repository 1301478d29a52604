package routes

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
)

// TestManagerBeatsUntilAnApplyHangs: an idle Manager keeps its heartbeat
// alive without applying anything; an apply that hangs (netlink that never
// answers) silences it.
func TestManagerBeatsUntilAnApplyHangs(t *testing.T) {
	const deadline = 400 * time.Millisecond
	release := make(chan struct{})
	applies := make(chan struct{}, 100)
	m := NewManager(slog.New(slog.DiscardHandler))
	m.apply = func([]Route) (Result, error) {
		applies <- struct{}{}
		<-release
		return Result{}, nil
	}
	wd := watchdog.New()
	m.SetHeartbeat(wd.Register("routes", deadline))
	go m.Run(t.Context(), time.Hour)

	watchdogtest.StaysAlive(t, wd, 3*deadline, "routes manager idle before the first Set")
	if len(applies) != 0 {
		t.Fatalf("the heartbeat made the manager apply %d times before any Set", len(applies))
	}
	m.Set([]Route{{Dst: netip.MustParsePrefix("10.244.1.0/26"), Via: netip.MustParseAddr("192.168.77.2"), Node: "b"}})
	watchdogtest.ExpectStalled(t, wd, "routes", "an apply hung")
	close(release)
	watchdogtest.ExpectAlive(t, wd, "the apply returned")
}
