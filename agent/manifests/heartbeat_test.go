package manifests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
)

// TestRunBeatsUntilItsCallbackHangs: a Watcher whose files do not change
// keeps its heartbeat alive, even polling only once an hour; a callback
// that does not return (a commit stuck on the store) silences it.
func TestRunBeatsUntilItsCallbackHangs(t *testing.T) {
	const deadline = 400 * time.Millisecond
	dir := t.TempDir()
	w := NewWatcher(dir, time.Hour)
	if _, err := w.Load(); err != nil {
		t.Fatal(err)
	}
	wd := watchdog.New()
	w.SetHeartbeat(wd.Register("manifests", deadline))
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx, func(*Objects, error) { <-release })
	}()
	defer func() { cancel(); <-done }()
	defer close(release)

	watchdogtest.StaysAlive(t, wd, 3*deadline, "watcher of an unchanged directory")
	if err := os.WriteFile(filepath.Join(dir, "ns.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: one}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	watchdogtest.ExpectStalled(t, wd, "manifests", "the callback of an edit hung")
}
