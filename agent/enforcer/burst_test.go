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
	"lockstep.dev/lockstep/test/seedtest"
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

// flakyAttachDataplane fails the first attach of one interface, as an
// attach fails whose link the kernel does not show yet.
type flakyAttachDataplane struct {
	*setDataplane
	flaky  string
	failed bool
}

func (d *flakyAttachDataplane) Attach(hostIf string) error {
	if hostIf == d.flaky && !d.failed {
		d.failed = true
		return fmt.Errorf("attach %s: link not found", hostIf)
	}
	return d.setDataplane.Attach(hostIf)
}

// TestEnforceEndpointRetriesAFailedAttach: an ADD whose endpoint another
// ADD's apply already covered, but could not attach, is not answered
// "not enforced" on that apply's word: it applies the latest state again,
// which attaches it, whether or not the store changed since.
func TestEnforceEndpointRetriesAFailedAttach(t *testing.T) {
	for _, later := range []bool{true, false} {
		t.Run(fmt.Sprintf("a later commit %v", later), func(t *testing.T) {
			st := seedtest.Store(t)
			dp := &flakyAttachDataplane{setDataplane: newSetDataplane(), flaky: "ls-x"}
			e := New(st, dp, nil)
			ctx := context.Background()
			txn := st.WriteTxn()
			if err := store.AttachEndpoint(txn, seedtest.Endpoint("x", netip.MustParseAddr("10.244.0.99"))); err != nil {
				txn.Abort()
				t.Fatal(err)
			}
			rev := txn.Revision()
			txn.Commit()
			if err := e.Sync(ctx); err != nil { // another ADD's apply
				t.Fatal(err)
			}
			if !dp.failed || e.Enforced("ls-x") {
				t.Fatalf("the first apply attached ls-x (failed attach: %v)", dp.failed)
			}
			if later {
				seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "moved": "on"})
			}
			if err := e.EnforceEndpoint(ctx, "ls-x", rev); err != nil {
				t.Fatalf("EnforceEndpoint after a failed attach: %v", err)
			}
			dp.mu.Lock()
			_, applied := dp.rules["ls-x"]
			dp.mu.Unlock()
			if !applied {
				t.Error("ls-x enforced, but the dataplane was not given its state")
			}
		})
	}
}
