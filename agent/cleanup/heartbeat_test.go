package cleanup

import (
	"context"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
)

// TestRunBeatsUntilACleanerHangs: with nothing to clean the Manager idles
// and keeps its heartbeat alive; a cleaner that hangs (a command that
// never returns) silences it.
func TestRunBeatsUntilACleanerHangs(t *testing.T) {
	const deadline = 400 * time.Millisecond
	release := make(chan struct{})
	hung := CleanerFunc(func(context.Context) error {
		<-release
		return nil
	})
	m, db := open(t, t.TempDir(), map[string]Cleaner{"iptables-legacy": hung})
	defer db.Close()
	wd := watchdog.New()
	m.SetHeartbeat(wd.Register("cleanup", deadline))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	watchdogtest.StaysAlive(t, wd, 3*deadline, "clean-up manager with nothing pending")
	if err := m.Schedule("iptables-legacy", "dataplane changed"); err != nil {
		t.Fatal(err)
	}
	watchdogtest.ExpectStalled(t, wd, "cleanup", "a cleaner hung")
	close(release)
	watchdogtest.ExpectAlive(t, wd, "the cleaner returned")
}
