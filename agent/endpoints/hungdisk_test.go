package endpoints

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/podnet"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/store"
)

// hungDisk is a state file whose fsync hangs until released: each Persist
// says it started, then waits.
type hungDisk struct {
	inner    store.Persister
	entered  chan struct{}
	released chan struct{}
}

func (d *hungDisk) Persist(changes memdb.Changes) (bool, error) {
	d.entered <- struct{}{}
	<-d.released
	return d.inner.Persist(changes)
}

// TestHungDiskAnswersTryAgainLater: with the state file's disk hung, the
// ADD stuck in its write, and an ADD queued behind it, are both answered
// "try again later" (code 11) at their deadline; reads keep being answered
// at once; and once the disk is back, the queued ADD, which changed
// nothing, succeeds when retried.
func TestHungDiskAnswersTryAgainLater(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.244.0.0/24")
	disk := &hungDisk{inner: f.db, entered: make(chan struct{}, 4), released: make(chan struct{})}
	f.disk.set(disk)
	released := false
	release := func() {
		if !released {
			released = true
			close(disk.released)
		}
	}
	defer release()

	const deadline = 300 * time.Millisecond
	sock := filepath.Join(t.TempDir(), "lockstep.sock")
	lis, err := server.ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewAPIServer(struct {
		*Service
		*podnet.Handler
	}{f.svc, podnet.New(f.svc)}, slog.New(slog.DiscardHandler), nil)
	srv.SetLimits(server.Limits{RequestTimeout: deadline})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	add := func(i int) (time.Duration, error) {
		start := time.Now()
		_, err := api.NewClient(sock, 5*time.Second).Add(ctx, api.AddRequest{Attachment: att(i), Netns: "/run/netns/x"})
		return time.Since(start), err
	}

	first := make(chan error, 1)
	go func() { _, err := add(1); first <- err }()
	select {
	case <-disk.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first ADD never reached the disk")
	}
	took, err := add(2)
	if api.CodeOf(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), "still being written to the state file") {
		t.Errorf("ADD queued behind the hung write: %v, want try-again-later saying why", err)
	}
	if took > deadline+time.Second {
		t.Errorf("queued ADD answered after %s, want about the %s deadline", took, deadline)
	}
	select {
	case err := <-first:
		if api.CodeOf(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), "could not finish add") {
			t.Errorf("ADD hung in its write: %v, want try-again-later", err)
		}
	case <-time.After(deadline + 2*time.Second):
		t.Errorf("the ADD hung in its write got no answer %s after its deadline", 2*time.Second)
	}
	start := time.Now()
	st, err := api.NewClient(sock, time.Second).Status(ctx)
	if err != nil || len(st.Pools) != 1 || st.Pools[0].Used != 0 {
		t.Errorf("status while the disk hangs: %+v, %v; want the pool, nothing committed", st, err)
	}
	if took := time.Since(start); took > deadline/2 {
		t.Errorf("status took %s while the disk hangs", took)
	}
	if e, err := store.EndpointByAttachment(f.svc.store.ReadTxn(), nil, toStore(att(2))); err != nil || e != nil {
		t.Errorf("the ADD that gave up left %v (%v)", e, err)
	}

	release() // the disk is back: commits pass through
	if _, err := add(2); err != nil {
		t.Errorf("retried ADD once the disk is back: %v", err)
	}
}
