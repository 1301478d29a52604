package source

import (
	"log/slog"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
	"lockstep.dev/lockstep/kube/client"
)

// TestRunBeatsWhileTheAPIServerIsAway: a Source whose API server does not
// answer waits for its first lists, and that wait is not a stuck loop: the
// heartbeat stays alive, so the agent's /healthz never restarts an agent
// for an API server that is away.
func TestRunBeatsWhileTheAPIServerIsAway(t *testing.T) {
	const deadline = 300 * time.Millisecond
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	wd := watchdog.New()
	src, err := New(Options{
		Config:    &client.Config{Host: "https://127.0.0.1:1"}, // nothing listens on port 1
		NodeName:  "node-a",
		Store:     st,
		Logger:    slog.New(slog.DiscardHandler),
		Heartbeat: wd.Register("kube-source", deadline),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(t.Context())
	}()
	watchdogtest.StaysAlive(t, wd, 5*deadline, "source waiting for an API server that does not answer")
	select {
	case <-done:
		t.Fatal("Run returned while the API server was away")
	default:
	}
}
