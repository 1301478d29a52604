package enforcer

import (
	"context"
	"net/netip"
	"testing"
	"time"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/test/seedtest"
)

func TestOnlyReleases(t *testing.T) {
	ready := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.10"))
	pending := seedtest.Endpoint("c", netip.MustParseAddr("10.244.0.12"))
	pending.State = store.EndpointPending
	confirmed := seedtest.Endpoint("c", netip.MustParseAddr("10.244.0.12"))
	release := store.Change{Table: store.TableEndpoints, Before: ready}
	reserve := store.Change{Table: store.TableEndpoints, After: pending}
	alloc := store.Change{Table: store.TableAllocations, Before: &store.Allocation{}}
	tests := []struct {
		name    string
		changes []store.Change
		want    bool
	}{
		{"nothing", nil, false},
		{"a release and its allocation", []store.Change{alloc, release}, true},
		{"a reservation alone", []store.Change{reserve}, false},
		{"an allocation alone", []store.Change{alloc}, false},
		{"a release, then an ADD's reservation", []store.Change{release, reserve}, true},
		{"a Ready endpoint no longer Ready", []store.Change{{Table: store.TableEndpoints, Before: ready, After: pending}}, true},
		{"a release and a confirm", []store.Change{release, {Table: store.TableEndpoints, Before: pending, After: confirmed}}, false},
		{"a release and a new Ready endpoint", []store.Change{release, {Table: store.TableEndpoints, After: confirmed}}, false},
		{"a release and a pod", []store.Change{release, {Table: store.TablePods, Before: &store.Pod{Object: seedtest.Pod("a", nil)}}}, false},
		{"a release and a policy", []store.Change{release, {Table: store.TablePolicies, After: &policyapi.NetworkPolicy{}}}, false},
		{"a release and a Service", []store.Change{release, {Table: store.TableServices, After: &store.Service{}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := onlyReleases(tt.changes); got != tt.want {
				t.Errorf("onlyReleases = %v, want %v", got, tt.want)
			}
		})
	}
}

// releaseTest runs an Enforcer with a release delay on the seed's store
// (endpoints ls-a and ls-b) and waits for its first apply.
type releaseTest struct {
	t  *testing.T
	st *store.Store
	dp *historyDataplane
	e  *Enforcer
}

func newReleaseTest(t *testing.T, delay time.Duration) *releaseTest {
	rt := &releaseTest{t: t, st: seedtest.Store(t), dp: &historyDataplane{}}
	rt.e = New(rt.st, rt.dp, nil)
	rt.e.SetReleaseDelay(delay)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.e.Run(ctx, 0) }()
	t.Cleanup(func() { cancel(); <-done })
	rt.waitApplies(1)
	return rt
}

func (rt *releaseTest) write(fn func(*store.Txn) error) uint64 {
	rt.t.Helper()
	txn := rt.st.WriteTxn()
	defer txn.Abort()
	if err := fn(txn); err != nil {
		rt.t.Fatal(err)
	}
	rev := txn.Revision()
	if err := txn.Commit(); err != nil {
		rt.t.Fatal(err)
	}
	return rev
}

func (rt *releaseTest) release(name string) uint64 {
	rt.t.Helper()
	return rt.write(func(txn *store.Txn) error {
		_, err := store.ReleaseEndpoint(txn, store.Attachment{ContainerID: "c-" + name, IfName: "eth0"})
		return err
	})
}

// waitApplies waits until the dataplane has had n applies.
func (rt *releaseTest) waitApplies(n int) {
	rt.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(rt.dp.states()) < n {
		if time.Now().After(deadline) {
			rt.t.Fatalf("%d applies after 10 s, want %d", len(rt.dp.states()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitHolding waits until Run holds back the changes up to revision rev.
func (rt *releaseTest) waitHolding(rev uint64) {
	rt.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rt.e.mu.Lock()
		held := !rt.e.releasesHeld.IsZero() && rt.e.heldRev >= rev
		rt.e.mu.Unlock()
		if held {
			return
		}
		if time.Now().After(deadline) {
			rt.t.Fatalf("Run does not hold back revision %d after 10 s", rev)
		}
		time.Sleep(time.Millisecond)
	}
}

// last returns the endpoints of the state applied last.
func (rt *releaseTest) last() map[string]bool {
	states := rt.dp.states()
	got := map[string]bool{}
	for hostIf := range states[len(states)-1].Endpoints {
		got[hostIf] = true
	}
	return got
}

// TestReleaseRidesWithTheNextADD: a DEL's release is not applied on its
// own while the release delay runs, the next ADD's reservation does not
// end the hold, and the ADD's apply carries the release: one apply, with
// the new endpoint in and the released one out.
func TestReleaseRidesWithTheNextADD(t *testing.T) {
	rt := newReleaseTest(t, time.Hour)
	rt.waitHolding(rt.release("a"))
	c := seedtest.Endpoint("c", netip.MustParseAddr("10.244.0.12"))
	c.State = store.EndpointPending
	rt.waitHolding(rt.write(func(txn *store.Txn) error { return store.AttachEndpoint(txn, c) }))
	if n := len(rt.dp.states()); n != 1 {
		t.Fatalf("%d applies after a release and a reservation, want 1 (the first): Run applied them", n)
	}
	ready := *c
	ready.State = store.EndpointReady
	rev := rt.write(func(txn *store.Txn) error { return store.UpsertEndpoint(txn, &ready) })
	if err := rt.e.EnforceEndpoint(context.Background(), "ls-c", rev); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.dp.states()); n != 2 {
		t.Fatalf("%d applies, want 2: the ADD's apply alone", n)
	}
	if got, want := rt.last(), map[string]bool{"ls-b": true, "ls-c": true}; !equalSets(got, want) {
		t.Errorf("the ADD's apply has endpoints %v, want %v", got, want)
	}
}

// TestReleaseDelay: a release is applied on its own once the delay
// passed, or at once without a delay; any other change is applied at
// once whatever the delay.
func TestReleaseDelay(t *testing.T) {
	t.Run("a release after the delay", func(t *testing.T) {
		rt := newReleaseTest(t, 20*time.Millisecond)
		rt.release("a")
		rt.waitApplies(2)
		if got, want := rt.last(), map[string]bool{"ls-b": true}; !equalSets(got, want) {
			t.Errorf("applied endpoints %v, want %v", got, want)
		}
	})
	t.Run("a release without a delay", func(t *testing.T) {
		rt := newReleaseTest(t, 0)
		rt.release("a")
		rt.waitApplies(2)
		if got, want := rt.last(), map[string]bool{"ls-b": true}; !equalSets(got, want) {
			t.Errorf("applied endpoints %v, want %v", got, want)
		}
	})
	t.Run("a label change with a release held", func(t *testing.T) {
		rt := newReleaseTest(t, time.Hour)
		rt.waitHolding(rt.release("a"))
		seedtest.SetPodLabels(t, rt.st, "b", map[string]string{"pod2": "no"})
		rt.waitApplies(2)
		if got, want := rt.last(), map[string]bool{"ls-b": true}; !equalSets(got, want) {
			t.Errorf("applied endpoints %v, want %v: the release rides with the label change", got, want)
		}
	})
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
