package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/test/seedtest"
)

// committed compiles the store's committed state.
func committed(tb testing.TB, st *store.Store) *policy.Desired {
	tb.Helper()
	snap, err := enforcer.Snapshot(st.ReadTxn())
	if err != nil {
		tb.Fatal(err)
	}
	d, err := policy.Compile(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// TestSeed000IPSetNeverDestroyedWhileReferenced replays seed 000 against
// this backend: while an Apply sits between "apply sets" and "update
// rules", pod b loses label pod2 (the last use of its identity's set), the
// background reconcile starts, and b gets the label back. The reconcile is
// a Resync behind the Enforcer's lock, so it waits; no command fails, no
// set is destroyed while a rule references it, and the node ends equal to
// the committed state.
func TestSeed000IPSetNeverDestroyedWhileReferenced(t *testing.T) {
	st := seedtest.Store(t)
	n := newFakeNode()
	d := newTestDataplane(t, ModeNFT, n)
	e := enforcer.New(st, d, nil)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("initial apply: %v", err)
	}
	reconciled := make(chan error, 1)
	var once sync.Once
	d.beforeRules = func() {
		once.Do(func() {
			seedtest.SetPodLabels(t, st, "b", nil)
			go func() { reconciled <- e.Resync(ctx) }()
			time.Sleep(50 * time.Millisecond) // every chance to interleave
			seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes"})
		})
	}
	seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"})
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("apply interrupted by label churn and reconcile: %v (the seed 000 failure)", err)
	}
	if err := <-reconciled; err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoViolations(t, n)
	assertView(t, n, ModeNFT, committed(t, st))
}

// TestSeed000HarnessDetectsTheRace shows the replay can fail: a reconcile
// that destroys the sets the newest committed state does not need, without
// the Enforcer's lock (what NPM's background thread did), breaks the
// in-flight Apply with the seed's "does not exist".
func TestSeed000HarnessDetectsTheRace(t *testing.T) {
	st := seedtest.Store(t)
	n := newFakeNode()
	d := newTestDataplane(t, ModeNFT, n)
	e := enforcer.New(st, d, nil)
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	d.beforeRules = func() {
		once.Do(func() {
			seedtest.SetPodLabels(t, st, "b", nil)
			newest := committed(t, st)
			p, _, err := (&renderer{mode: ModeNFT, fams: d.r.fams}).render(newest, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Unsynchronised reconcile: destroy every set the newest state
			// does not need that no rule in force references.
			n.mu.Lock()
			for name := range n.sets {
				if _, need := p.sets[name]; !need && !n.referenced(name) {
					delete(n.sets, name)
				}
			}
			n.mu.Unlock()
		})
	}
	seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"})
	err := e.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "doesn't exist") {
		t.Fatalf("unsynchronised reconcile: got %v, want the seed's missing-set failure", err)
	}
}

// TestChurnWithTransientFailures drives label, policy and endpoint churn
// through a real Enforcer and Store while 30% of commands fail (before
// doing anything, half-way through an ipset batch, or after doing
// everything). No command ever breaks a kernel invariant, every successful
// Sync leaves the node exactly in the committed state, and once the
// failures stop the node converges.
func TestChurnWithTransientFailures(t *testing.T) {
	rounds := 2000
	if testing.Short() {
		rounds = 300
	}
	st := seedtest.Store(t)
	n := newFakeNode()
	n.faults = randomFaults(7, 0.3)
	d := newTestDataplane(t, ModeLegacy, n)
	e := enforcer.New(st, d, nil)
	ctx := context.Background()
	failed, checked := 0, 0
	for i := range rounds {
		churn(t, st, i)
		if i%7 == 0 {
			d.Invalidate() // a periodic resync
		}
		if err := e.Sync(ctx); err != nil {
			if !injected(err) {
				t.Fatalf("round %d: Sync failed for a reason other than an injected fault: %v", i, err)
			}
			failed++
			continue
		}
		checked++
		n.mu.Lock()
		faults := n.faults
		n.faults = nil // the reference apply below runs on its own node, but be explicit
		n.mu.Unlock()
		assertView(t, n, ModeLegacy, committed(t, st))
		n.mu.Lock()
		n.faults = faults
		n.mu.Unlock()
	}
	assertNoViolations(t, n)

	// The same, concurrently: churners and a resync loop.
	var wg sync.WaitGroup
	var concurrentOK atomic.Int64
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds / 4 {
				if g < 2 {
					churn(t, st, i*2+g)
				} else {
					d.Invalidate()
				}
				if e.Sync(ctx) == nil {
					concurrentOK.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assertNoViolations(t, n)

	n.mu.Lock()
	n.faults = nil
	n.mu.Unlock()
	if err := e.Resync(ctx); err != nil {
		t.Fatalf("first Sync without failures: %v", err)
	}
	assertView(t, n, ModeLegacy, committed(t, st))
	t.Logf("%d rounds: %d syncs failed, %d succeeded and matched exactly; %d concurrent syncs succeeded", rounds, failed, checked, concurrentOK.Load())
	if failed == 0 || checked == 0 {
		t.Fatalf("failed=%d checked=%d: the faults did not exercise both outcomes", failed, checked)
	}
}

// injected reports whether err is one of the fake's injected faults.
func injected(err error) bool {
	for _, msg := range []string{"xtables lock", "signal: killed", "interrupted"} {
		if strings.Contains(err.Error(), msg) {
			return true
		}
	}
	return false
}

// churn makes round i's change: b's labels, the churn policy (with an
// ipBlock half the time), or pod c's endpoint (added when absent, removed
// when present).
func churn(tb testing.TB, st *store.Store, i int) {
	tb.Helper()
	switch i % 3 {
	case 0:
		labels := map[string]string{}
		if i%2 == 0 {
			labels["pod2"] = "yes"
		}
		if i%5 < 2 {
			labels[fmt.Sprintf("l%d", i%4)] = "v"
		}
		seedtest.SetPodLabels(tb, st, "b", labels)
	case 1:
		txn := st.WriteTxn()
		defer txn.Abort()
		var err error
		if i%4 == 3 {
			err = store.DeletePolicy(txn, "x", "churn")
		} else {
			peer := policyapi.NetworkPolicyPeer{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{fmt.Sprintf("l%d", i%4): "v"}}}
			if i%2 == 0 {
				peer = policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "10.244.0.0/16", Except: []string{fmt.Sprintf("10.244.%d.0/24", i%3)}}}
			}
			err = store.UpsertPolicy(txn, &policyapi.NetworkPolicy{
				ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "churn"},
				Spec: policyapi.NetworkPolicySpec{
					PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress},
					Ingress:     []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{peer}}},
					Egress:      []policyapi.EgressRule{{To: []policyapi.NetworkPolicyPeer{peer}}},
				},
			})
		}
		if err != nil {
			tb.Error(err)
			return
		}
		txn.Commit()
	case 2:
		txn := st.WriteTxn()
		defer txn.Abort()
		att := store.Attachment{ContainerID: "c-c", IfName: "eth0"}
		cur, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil {
			tb.Error(err)
			return
		}
		if cur == nil {
			if err = store.UpsertPod(txn, seedtest.Pod("c", map[string]string{"pod2": "yes"})); err == nil {
				err = store.AttachEndpoint(txn, seedtest.Endpoint("c", netip.AddrFrom4([4]byte{10, 244, 0, 12})))
			}
		} else {
			if _, err = store.ReleaseEndpoint(txn, att); err == nil {
				err = store.DeletePod(txn, "x", "c")
			}
		}
		if err != nil {
			tb.Error(err)
			return
		}
		txn.Commit()
	}
}
