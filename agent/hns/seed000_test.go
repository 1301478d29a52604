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
	"lockstep.dev/lockstep/test/seedtest"
)

var quiet = slog.New(slog.DiscardHandler)

var _ enforcer.Dataplane = (*Dataplane)(nil)

// seedStore is seedtest.Store with HNS endpoints for ls-a and ls-b in m.
func seedStore(t *testing.T, m *Memory) *store.Store {
	t.Helper()
	st := seedtest.Store(t)
	m.AddEndpoint("ls-a")
	m.AddEndpoint("ls-b")
	return st
}

// attachLocal records the Ready local endpoint ls-<name> of pod x/<name>
// and creates its HNS endpoint.
func attachLocal(t *testing.T, txn *store.Txn, m *Memory, name string, addr netip.Addr) {
	t.Helper()
	must(t, store.AttachEndpoint(txn, seedtest.Endpoint(name, addr)))
	m.AddEndpoint("ls-" + name)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
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
			seedtest.SetPodLabels(t, st, "b", nil)
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
	seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes", "extra": "1"})
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
