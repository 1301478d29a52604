package enforcer

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/seedtest"
)

// heldDataplane counts its applies and holds the first one until
// released. Every apply also has the store change meanwhile (churn: a
// pod's labels), as a busy node's store does, so that the latest
// revision is never the one just applied.
type heldDataplane struct {
	*setDataplane
	applies atomic.Int32
	entered chan struct{}
	release chan struct{}
	churn   func(n int32)
}

func (d *heldDataplane) Apply(desired *policy.Desired) error {
	n := d.applies.Add(1)
	if n == 1 {
		close(d.entered)
		<-d.release
	}
	d.churn(n)
	return d.setDataplane.Apply(desired)
}

// TestBurstOfADDsSharesApplies: ADDs confirmed while an apply is in
// progress are all put in force by the one apply that follows it, each
// answered enforced, rather than by one apply each, although the store
// keeps changing meanwhile.
func TestBurstOfADDsSharesApplies(t *testing.T) {
	const n = 16
	st := seedtest.Store(t)
	dp := &heldDataplane{setDataplane: newSetDataplane(), entered: make(chan struct{}), release: make(chan struct{}),
		churn: func(n int32) {
			seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "churn": fmt.Sprint(n)})
		}}
	e := New(st, dp, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// confirm commits pod i's endpoint, as an ADD's confirm does, and
	// returns the revision it committed as.
	confirm := func(i int) (string, uint64, error) {
		name := fmt.Sprintf("p%d", i)
		txn := st.WriteTxn()
		defer txn.Abort()
		if err := store.UpsertPod(txn, seedtest.Pod(name, map[string]string{"app": "burst"})); err != nil {
			return "", 0, err
		}
		if err := store.AttachEndpoint(txn, seedtest.Endpoint(name, netip.AddrFrom4([4]byte{10, 244, 0, byte(100 + i)}))); err != nil {
			return "", 0, err
		}
		rev := txn.Revision()
		txn.Commit()
		return "ls-" + name, rev, nil
	}
	errs := make(chan error, n)
	var committed sync.WaitGroup
	add := func(i int) {
		hostIf, rev, err := confirm(i)
		committed.Done()
		if err == nil {
			err = e.EnforceEndpoint(ctx, hostIf, rev)
		}
		errs <- err
	}
	committed.Add(n)
	go add(0)
	select {
	case <-dp.entered:
	case <-ctx.Done():
		t.Fatal("the first ADD's apply never started")
	}
	for i := 1; i < n; i++ {
		go add(i)
	}
	committed.Wait()
	close(dp.release)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("ADD: %v", err)
		}
	}
	if got := dp.applies.Load(); got != 2 {
		t.Errorf("%d ADDs took %d applies, want 2: the first, then one for all confirmed while it ran", n, got)
	}
	for i := range n {
		if hostIf := fmt.Sprintf("ls-p%d", i); !e.Enforced(hostIf) {
			t.Errorf("%s is not enforced", hostIf)
		}
	}
}
