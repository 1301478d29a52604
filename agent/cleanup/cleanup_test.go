package cleanup

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
)

// fakeBackend holds "rules" a cleaner must remove; a flaky cleaner removes
// some of them and fails, like a real iptables run that hits transient
// errors half way.
type fakeBackend struct {
	mu    sync.Mutex
	left  int
	rng   *rand.Rand
	fail  float64
	calls int
}

func (b *fakeBackend) Clean(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	for b.left > 0 {
		if b.rng.Float64() < b.fail {
			return errors.New("iptables-legacy: resource temporarily unavailable")
		}
		b.left--
	}
	return nil
}

func (b *fakeBackend) remaining() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

func open(t *testing.T, dir string, cleaners map[string]Cleaner) (*Manager, *persist.DB) {
	t.Helper()
	db, err := persist.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.NewDurable(db)
	if err != nil {
		t.Fatal(err)
	}
	m := New(st, db, cleaners, nil)
	m.MinBackoff, m.MaxBackoff = 0, 0
	if err := m.Restore(); err != nil {
		t.Fatal(err)
	}
	return m, db
}

// TestSeed002CleanupRetriedOnItsBackendUntilNothingIsLeft replays seed 002:
// the first clean-up of the old backend fails part way (30% of operations
// fail transiently), the agent restarts before it is done, and the retry
// must still run against the same backend until nothing is left.
func TestSeed002CleanupRetriedOnItsBackendUntilNothingIsLeft(t *testing.T) {
	dir := t.TempDir()
	legacy := &fakeBackend{left: 500, rng: rand.New(rand.NewSource(2)), fail: 0.3}
	nft := &fakeBackend{rng: rand.New(rand.NewSource(3))}
	cleaners := map[string]Cleaner{"iptables-legacy": legacy, "iptables-nft": nft}

	m, db := open(t, dir, cleaners)
	if err := m.Schedule("iptables-legacy", "dataplane changed from iptables-legacy to iptables-nft"); err != nil {
		t.Fatal(err)
	}
	// A few attempts, then the agent "crashes" with rules still left.
	for i := 0; i < 3 && legacy.remaining() > 0; i++ {
		if _, err := m.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if legacy.remaining() == 0 {
		t.Fatal("test setup: the flaky cleaner finished in 3 attempts; the restart path is not exercised")
	}
	pending := m.Pending()
	if len(pending) != 1 || pending[0].Attempts == 0 || pending[0].LastError == "" {
		t.Fatalf("after failed attempts: pending = %+v; want one record with attempts and the last error", pending)
	}
	db.Close()

	m, db = open(t, dir, cleaners)
	defer db.Close()
	if p := m.Pending(); len(p) != 1 || p[0].Backend != "iptables-legacy" || p[0].Attempts != pending[0].Attempts {
		t.Fatalf("after restart: pending = %+v; want the legacy clean-up with its history", p)
	}
	for i := 0; i < 1000 && len(m.Pending()) > 0; i++ {
		if _, err := m.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if left := legacy.remaining(); left != 0 {
		t.Fatalf("%d legacy rules left", left)
	}
	if len(m.Pending()) != 0 {
		t.Fatalf("clean-up still pending after the backend is empty: %+v", m.Pending())
	}
	if nft.calls != 0 {
		t.Errorf("the nft cleaner ran %d times; the legacy clean-up must only ever use legacy tools", nft.calls)
	}
	if a := m.AttemptCounts()["iptables-legacy"]; a.Succeeded != 1 || a.Failed == 0 {
		t.Errorf("attempt counts = %+v; want 1 success after failures", a)
	}
	// Finished means finished on disk too.
	db.Close()
	m, db = open(t, dir, cleaners)
	defer db.Close()
	if p := m.Pending(); len(p) != 0 {
		t.Fatalf("finished clean-up came back after restart: %+v", p)
	}
}

func TestUnknownBackendIsKeptNotDropped(t *testing.T) {
	m, db := open(t, t.TempDir(), map[string]Cleaner{})
	defer db.Close()
	if err := m.Schedule("hns", "recorded by a Windows build"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := m.Pending()
	if len(p) != 1 || p[0].Attempts != 1 || p[0].LastError == "" {
		t.Fatalf("pending = %+v; want the record kept with the error", p)
	}
}

func TestScheduleIsIdempotent(t *testing.T) {
	b := &fakeBackend{left: 1, rng: rand.New(rand.NewSource(1)), fail: 1}
	m, db := open(t, t.TempDir(), map[string]Cleaner{"ebpf": b})
	defer db.Close()
	for i := 0; i < 2; i++ {
		if err := m.Schedule("ebpf", "dataplane changed"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if p := m.Pending(); len(p) != 1 || p[0].Attempts != 2 {
		t.Fatalf("pending = %+v; want one record with 2 attempts (re-scheduling must not reset it)", p)
	}
}

func TestBackoffDoublesAndIsBounded(t *testing.T) {
	m := &Manager{MinBackoff: time.Second, MaxBackoff: 10 * time.Second}
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{{0, 0}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {60, 10 * time.Second}} {
		if got := m.backoff(tc.attempts); got != tc.want {
			t.Errorf("backoff(%d) = %v, want %v", tc.attempts, got, tc.want)
		}
	}
}

func TestRunRetriesUntilDone(t *testing.T) {
	b := &fakeBackend{left: 50, rng: rand.New(rand.NewSource(4)), fail: 0.3}
	m, db := open(t, t.TempDir(), map[string]Cleaner{"iptables-nft": b})
	defer db.Close()
	m.MinBackoff, m.MaxBackoff = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	if err := m.Schedule("iptables-nft", "dataplane changed"); err != nil {
		t.Fatal(err)
	}
	for len(m.Pending()) > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if b.remaining() != 0 || len(m.Pending()) != 0 {
		t.Fatalf("Run stopped with %d rules and %d records left", b.remaining(), len(m.Pending()))
	}
}
