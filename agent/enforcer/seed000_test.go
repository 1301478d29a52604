package enforcer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/test/seedtest"
)

// setDataplane models a backend that materialises peers as named sets
// (ipsets, HNS SetPolicies) with their real invariants: a rule can only
// reference a set that exists, and a set a rule references cannot be
// deleted. Apply runs in the order Azure NPM's dataplane does: apply sets,
// update pods, then delete the sets nothing references any more.
type setDataplane struct {
	mu    sync.Mutex
	sets  map[policyapi.Peer]bool
	rules map[string]map[policy.RuleKey]bool

	inApply    atomic.Int32
	overlapped atomic.Bool
	// betweenSetsAndPods runs after "apply sets", before "update pod".
	betweenSetsAndPods func()
}

func newSetDataplane() *setDataplane {
	return &setDataplane{sets: map[policyapi.Peer]bool{}, rules: map[string]map[policy.RuleKey]bool{}}
}

func (f *setDataplane) Attach(string) error { return nil }
func (f *setDataplane) Detach(hostIf string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rules, hostIf)
	return nil
}

// referenced lists the sets d needs.
func referenced(d *policy.Desired) map[policyapi.Peer]bool {
	need := map[policyapi.Peer]bool{}
	for _, ep := range d.Endpoints {
		for k := range ep.Rules {
			if k.Peer != policyapi.PeerAny && k.Peer != policyapi.PeerWorld {
				need[k.Peer] = true
			}
		}
	}
	return need
}

func (f *setDataplane) Apply(d *policy.Desired) error {
	if f.inApply.Add(1) > 1 {
		f.overlapped.Store(true)
	}
	defer f.inApply.Add(-1)
	need := referenced(d)
	// 1. apply sets
	f.mu.Lock()
	for s := range need {
		f.sets[s] = true
	}
	f.mu.Unlock()
	if f.betweenSetsAndPods != nil {
		f.betweenSetsAndPods()
	}
	// 2. update pods
	f.mu.Lock()
	defer f.mu.Unlock()
	for hostIf, ep := range d.Endpoints {
		rules := map[policy.RuleKey]bool{}
		for k := range ep.Rules {
			if k.Peer != policyapi.PeerAny && k.Peer != policyapi.PeerWorld && !f.sets[k.Peer] {
				return fmt.Errorf("update pod %s: selector set %d does not exist", hostIf, k.Peer)
			}
			rules[k] = true
		}
		f.rules[hostIf] = rules
	}
	// 3. delete sets nothing references
	return f.deleteUnreferencedLocked(need)
}

// deleteUnreferencedLocked deletes the sets outside keep, refusing (as HNS
// does) to delete one a rule still references.
func (f *setDataplane) deleteUnreferencedLocked(keep map[policyapi.Peer]bool) error {
	for s := range f.sets {
		if keep[s] {
			continue
		}
		for hostIf, rules := range f.rules {
			for k := range rules {
				if k.Peer == s {
					return fmt.Errorf("delete set %d: still referenced by %s", s, hostIf)
				}
			}
		}
		delete(f.sets, s)
	}
	return nil
}

// TestSeed000LabelRemovalDuringReconcile replays seed 000: pod b is the last
// pod with label pod2; while an apply is between "apply sets" and "update
// pod", b loses the label, gets it back, and the background reconcile
// runs. In Azure NPM the reconcile deleted the set in that window and the
// update failed ("selector ipset ... does not exist") until restarted.
// In lockstep the reconcile is a Resync of a committed snapshot behind the
// same lock, so it runs after the apply, and nothing fails.
func TestSeed000LabelRemovalDuringReconcile(t *testing.T) {
	st := seedtest.Store(t)
	dp := newSetDataplane()
	e := New(st, dp, nil)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("initial apply: %v", err)
	}
	if len(dp.sets) != 1 {
		t.Fatalf("initial state: sets %v, want the one set of b's identity", dp.sets)
	}

	// The window: b loses pod2 (its identity's last use), the reconcile
	// starts, b gets the label back, all while the first apply sits between
	// its two steps.
	reconciled := make(chan error, 1)
	var once sync.Once
	dp.betweenSetsAndPods = func() {
		once.Do(func() {
			seedtest.SetPodLabels(t, st, "b", nil)
			go func() { reconciled <- e.Resync(ctx) }()
			time.Sleep(50 * time.Millisecond) // give the reconcile every chance to interleave
			seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes"})
		})
	}
	seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"}) // the change that triggers the apply
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("apply interrupted by label churn and reconcile: %v (the seed 000 failure)", err)
	}
	if err := <-reconciled; err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if dp.overlapped.Load() {
		t.Fatal("the reconcile's apply overlapped the in-flight apply")
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, st, dp)
}

// TestSeed000HarnessDetectsTheRace shows the replay can fail: a reconcile
// that deletes sets by the newest committed state without taking the
// enforcer's lock (what NPM's background thread did) breaks the in-flight
// apply with the seed's error.
func TestSeed000HarnessDetectsTheRace(t *testing.T) {
	st := seedtest.Store(t)
	dp := newSetDataplane()
	e := New(st, dp, nil)
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	dp.betweenSetsAndPods = func() {
		once.Do(func() {
			seedtest.SetPodLabels(t, st, "b", nil)
			snap, err := Snapshot(st.ReadTxn())
			if err != nil {
				t.Fatal(err)
			}
			d, err := policy.Compile(snap)
			if err != nil {
				t.Fatal(err)
			}
			// Unsynchronised reconcile: drop sets the newest state does not
			// need, ignoring the apply in flight. The rules still applied
			// refer to the new set only after step 2, so deletion succeeds.
			dp.mu.Lock()
			for s := range dp.sets {
				if !referenced(d)[s] {
					delete(dp.sets, s)
				}
			}
			dp.mu.Unlock()
		})
	}
	seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"})
	err := e.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("unsynchronised reconcile: got %v, want the seed's \"does not exist\" failure", err)
	}
}

// TestEnforcerChurnNeverFailsAnApply: label churn, policy churn and
// reconciles race for many rounds; every apply succeeds and the dataplane
// ends equal to the committed state.
func TestEnforcerChurnNeverFailsAnApply(t *testing.T) {
	st := seedtest.Store(t)
	dp := newSetDataplane()
	e := New(st, dp, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rounds := 2000
	if testing.Short() {
		rounds = 200
	}
	var wg sync.WaitGroup
	var applyErrs atomic.Int64
	errc := make(chan error, 1)
	record := func(err error) {
		if err != nil && ctx.Err() == nil {
			applyErrs.Add(1)
			select {
			case errc <- err:
			default:
			}
		}
	}
	wg.Add(3)
	go func() { // labels
		defer wg.Done()
		for i := 0; i < rounds; i++ {
			labels := map[string]string{}
			if i%2 == 0 {
				labels["pod2"] = "yes"
			}
			if i%3 == 0 {
				labels[fmt.Sprintf("l%d", i%5)] = "v"
			}
			seedtest.SetPodLabels(t, st, "b", labels)
			record(e.Sync(ctx))
		}
	}()
	go func() { // policies
		defer wg.Done()
		for i := 0; i < rounds; i++ {
			txn := st.WriteTxn()
			np := &policyapi.NetworkPolicy{
				ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "churn"},
				Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{
					PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{fmt.Sprintf("l%d", i%5): "v"}},
				}}}}},
			}
			var err error
			if i%4 == 3 {
				err = store.DeletePolicy(txn, "x", "churn")
			} else {
				err = store.UpsertPolicy(txn, np)
			}
			if err != nil {
				txn.Abort()
				t.Error(err)
				return
			}
			txn.Commit()
			record(e.Sync(ctx))
		}
	}()
	go func() { // background reconcile
		defer wg.Done()
		for i := 0; i < rounds/4; i++ {
			record(e.Resync(ctx))
		}
	}()
	wg.Wait()
	if n := applyErrs.Load(); n > 0 {
		t.Fatalf("%d applies failed, first: %v", n, <-errc)
	}
	if dp.overlapped.Load() {
		t.Fatal("two applies overlapped")
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, st, dp)
}

// assertConverged checks the fake holds exactly the committed state: the
// sets the committed rules need, and those rules.
func assertConverged(t *testing.T, st *store.Store, dp *setDataplane) {
	t.Helper()
	snap, err := Snapshot(st.ReadTxn())
	if err != nil {
		t.Fatal(err)
	}
	want, err := policy.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	need := referenced(want)
	if len(dp.sets) != len(need) {
		t.Errorf("dataplane sets %v, committed state needs %v", dp.sets, need)
	}
	for hostIf, ep := range want.Endpoints {
		if len(dp.rules[hostIf]) != len(ep.Rules) {
			t.Errorf("%s: dataplane has %d rules, committed state %d", hostIf, len(dp.rules[hostIf]), len(ep.Rules))
		}
		for k := range ep.Rules {
			if !dp.rules[hostIf][k] {
				t.Errorf("%s: rule %+v missing from the dataplane", hostIf, k)
			}
		}
	}
}
