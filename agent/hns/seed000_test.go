package hns

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/agent/store"
)

var quiet = slog.New(slog.DiscardHandler)

var _ enforcer.Dataplane = (*Dataplane)(nil)

// seedStore builds seed 000's cluster in a store: namespace x, server pod
// a, and pod b, the only pod with label pod2, which policy allow-b lets
// reach a; both are local, on HNS endpoints ls-a and ls-b.
func seedStore(t *testing.T, m *Memory) *store.Store {
	t.Helper()
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	txn := st.WriteTxn()
	defer txn.Abort()
	must(t, store.UpsertNamespace(txn, &policy.Namespace{ObjectMeta: policy.ObjectMeta{Name: "x"}}))
	must(t, store.UpsertPod(txn, labelled("a", map[string]string{"app": "server"})))
	must(t, store.UpsertPod(txn, labelled("b", map[string]string{"pod2": "yes"})))
	must(t, store.UpsertPolicy(txn, &policy.NetworkPolicy{
		ObjectMeta: policy.ObjectMeta{Namespace: "x", Name: "allow-b"},
		Spec: policy.NetworkPolicySpec{
			PodSelector: policy.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []policy.IngressRule{{From: []policy.NetworkPolicyPeer{{
				PodSelector: &policy.LabelSelector{MatchExpressions: []policy.LabelSelectorRequirement{{Key: "pod2", Operator: policy.OpExists}}},
			}}}},
		},
	}))
	for i, name := range []string{"a", "b"} {
		attachLocal(t, txn, m, name, netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + i)}))
	}
	txn.Commit()
	return st
}

// attachLocal records a Ready local endpoint ls-<name> for pod x/<name>
// and creates its HNS endpoint.
func attachLocal(t *testing.T, txn *store.Txn, m *Memory, name string, addr netip.Addr) {
	t.Helper()
	must(t, store.AttachEndpoint(txn, &store.Endpoint{
		Attachment: store.Attachment{ContainerID: "c-" + name, IfName: "eth0"},
		HostIfName: "ls-" + name,
		Pod:        store.PodRef{Namespace: "x", Name: name},
		Addresses:  []store.AddressRef{{Pool: "10.244.0.0/24", Addr: addr, Bits: 24}},
		State:      store.EndpointReady,
	}))
	m.AddEndpoint("ls-" + name)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func labelled(name string, labels map[string]string) *policy.Pod {
	return &policy.Pod{ObjectMeta: policy.ObjectMeta{Namespace: "x", Name: name, Labels: labels}}
}

func setPodLabels(t *testing.T, st *store.Store, name string, labels map[string]string) {
	t.Helper()
	txn := st.WriteTxn()
	defer txn.Abort()
	if err := store.UpsertPod(txn, labelled(name, labels)); err != nil {
		t.Error(err)
		return
	}
	txn.Commit()
}

// committed compiles the store's committed state.
func committed(t *testing.T, st *store.Store) *policy.Desired {
	t.Helper()
	snap, err := enforcer.Snapshot(st.ReadTxn())
	if err != nil {
		t.Fatal(err)
	}
	d, err := policy.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSeed000SetPolicyNeverDeletedWhileReferenced replays seed 000 on the
// HNS backend: pod b is the last pod with label pod2; while an apply sits
// between "apply sets" and "update endpoint ACLs", b loses the label, the
// background reconcile (a Resync) starts, and b gets the label back. In
// Azure NPM the reconcile deleted the selector set in that window and the
// ACL update failed ("selector ipset ... does not exist") until restarted.
// Here the reconcile goes through the enforcer's lock and the Dataplane
// deletes a SetPolicy only once no applied ACL references it: no apply
// fails, no HNS request breaks an invariant, and HNS ends holding exactly
// the committed state.
func TestSeed000SetPolicyNeverDeletedWhileReferenced(t *testing.T) {
	m := NewMemory()
	st := seedStore(t, m)
	dp := New(m)
	e := enforcer.New(st, dp, quiet)
	ctx := context.Background()
	must(t, e.Sync(ctx))
	sets, _ := m.State()
	if len(sets) != 1 {
		t.Fatalf("initial state: sets %v, want the one set of b's identity", sets)
	}

	reconciled := make(chan error, 1)
	var once sync.Once
	dp.betweenSetsAndACLs = func() {
		once.Do(func() {
			setPodLabels(t, st, "b", nil)
			go func() { reconciled <- e.Resync(ctx) }()
			time.Sleep(50 * time.Millisecond) // give the reconcile every chance to interleave
			setPodLabels(t, st, "b", map[string]string{"pod2": "yes"})
		})
	}
	setPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"}) // the change that triggers the apply
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("apply interrupted by label churn and reconcile: %v (the seed 000 failure)", err)
	}
	if err := <-reconciled; err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	must(t, e.Sync(ctx))
	assertMatches(t, m, committed(t, st))
}

// TestSeed000HarnessDetectsTheRace shows the replay can fail: a reconcile
// that deletes the sets the newest committed state does not need, straight
// from HNS and without the enforcer's lock (what NPM's background thread
// did), deletes the set the in-flight apply just created, and that apply's
// ACL update fails with the seed's "does not exist".
func TestSeed000HarnessDetectsTheRace(t *testing.T) {
	m := NewMemory()
	st := seedStore(t, m)
	dp := New(m)
	e := enforcer.New(st, dp, quiet)
	must(t, e.Sync(context.Background()))
	var once sync.Once
	dp.betweenSetsAndACLs = func() {
		once.Do(func() {
			setPodLabels(t, st, "b", nil)
			want, err := render(committed(t, st))
			if err != nil {
				t.Fatal(err)
			}
			sets, _ := m.State()
			for id := range sets {
				if _, ok := want.sets[id]; !ok {
					// HNS refuses the one an applied ACL references; the
					// set the apply just created is free to go.
					_ = m.DeleteSetPolicies(ids(id))
				}
			}
		})
	}
	setPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"})
	err := e.Sync(context.Background())
	if !errors.Is(err, ErrSetNotFound) {
		t.Fatalf("unsynchronised reconcile: got %v, want the seed's set-does-not-exist failure", err)
	}
}

// TestResyncRepairsDrift: ACLs and sets changed behind lockstep's back are
// put back by the next resync.
func TestResyncRepairsDrift(t *testing.T) {
	m := NewMemory()
	st := seedStore(t, m)
	e := enforcer.New(st, New(m), quiet)
	ctx := context.Background()
	must(t, e.Sync(ctx))
	_, acls := m.State()
	if len(acls["ls-a"]) == 0 {
		t.Fatal("server pod a has no ACLs")
	}
	must(t, m.SetEndpointACLs("ls-a", nil))
	must(t, m.AddSetPolicies([]SetPolicy{{ID: IDPrefix + "id-9999", Type: SetIPSet, Values: []string{"10.9.9.9"}}}))
	must(t, e.Resync(ctx))
	assertMatches(t, m, committed(t, st))
}

// TestRestartAdoptsLeftovers: a new Dataplane on an HNS that holds a
// previous agent's sets and ACLs (one on an endpoint no longer desired,
// referencing a set no longer desired) converges without one refused
// request.
func TestRestartAdoptsLeftovers(t *testing.T) {
	m := NewMemory()
	old := compileScenario(t, verdictCases()[5].policies...)
	m.AddEndpoint("ep-a")
	m.AddEndpoint("ep-b")
	must(t, New(m).Apply(old))
	next := compileScenario(t, verdictCases()[3].policies...)
	delete(next.Endpoints, "ep-a")
	must(t, New(m).Apply(next))
	assertMatches(t, m, next)
}
