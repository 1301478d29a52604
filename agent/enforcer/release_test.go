package enforcer

import (
	"context"
	"fmt"
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
	rewired := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.10"))
	rewired.State = store.EndpointPending
	moved := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.99"))
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
		{"a release, blocks, clean-ups and selectors", []store.Change{release, {Table: store.TableBlocks}, {Table: store.TableCleanups}, {Table: store.TableSelectors}}, true},
		{"a reservation alone", []store.Change{reserve}, false},
		{"an allocation alone", []store.Change{alloc}, false},
		{"an ADD rolled back", []store.Change{{Table: store.TableEndpoints, Before: pending}}, false},
		{"a release, then an ADD's reservation", []store.Change{release, reserve}, true},
		{"a Ready endpoint re-wired by a repeated ADD", []store.Change{{Table: store.TableEndpoints, Before: ready, After: rewired}}, false},
		{"a Ready endpoint with new addresses", []store.Change{{Table: store.TableEndpoints, Before: ready, After: moved}}, false},
		{"a release and a confirm", []store.Change{release, {Table: store.TableEndpoints, Before: pending, After: confirmed}}, false},
		{"a release and a new Ready endpoint", []store.Change{release, {Table: store.TableEndpoints, After: confirmed}}, false},
		{"a release and a pod", []store.Change{release, {Table: store.TablePods, Before: &store.Pod{Object: seedtest.Pod("a", nil)}}}, false},
		{"a release and a namespace", []store.Change{release, {Table: store.TableNamespaces, Before: &policyapi.Namespace{}}}, false},
		{"a release and a policy", []store.Change{release, {Table: store.TablePolicies, After: &policyapi.NetworkPolicy{}}}, false},
		{"a release and an identity", []store.Change{release, {Table: store.TableIdentities, Before: &store.Identity{}}}, false},
		{"a release and a Service", []store.Change{release, {Table: store.TableServices, After: &store.Service{}}}, false},
		{"a release and an EndpointSlice", []store.Change{release, {Table: store.TableEndpointSlices, Before: &store.EndpointSlice{}}}, false},
		{"a release and a table nobody classified", []store.Change{release, {Table: "new-table"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := onlyReleases(tt.changes); got != tt.want {
				t.Errorf("onlyReleases = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEveryTableClassified: a table added to the store is either policy
// input (and ends a held release) or listed in notCompilerInput, by a
// decision, not by default.
func TestEveryTableClassified(t *testing.T) {
	// What feed and feedChange read.
	inputs := map[string]bool{
		store.TableEndpoints: true, store.TableNamespaces: true, store.TablePods: true, store.TablePolicies: true,
		store.TableIdentities: true, store.TableServices: true, store.TableEndpointSlices: true, store.TableNodes: true,
	}
	for _, table := range store.TableNames() {
		switch {
		case inputs[table] && notCompilerInput[table]:
			t.Errorf("table %s is both policy input and in notCompilerInput", table)
		case !inputs[table] && !notCompilerInput[table]:
			t.Errorf("table %s is new: add it to notCompilerInput if the compiler never reads it, or to this test's inputs", table)
		}
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
	return commit(rt.t, rt.st, fn)
}

// commit runs fn in a write transaction of st, commits it and returns its
// revision.
func commit(t *testing.T, st *store.Store, fn func(*store.Txn) error) uint64 {
	t.Helper()
	txn := st.WriteTxn()
	defer txn.Abort()
	if err := fn(txn); err != nil {
		t.Fatal(err)
	}
	rev := txn.Revision()
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
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
func (rt *releaseTest) last() map[string]bool { return lastEndpoints(rt.dp) }

// lastEndpoints returns the endpoints of the state dp applied last.
func lastEndpoints(dp *historyDataplane) map[string]bool {
	states := dp.states()
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
		const delay = 50 * time.Millisecond
		rt := newReleaseTest(t, delay)
		committed := time.Now()
		rt.release("a")
		rt.waitApplies(2)
		if held := time.Since(committed); held < delay {
			t.Errorf("the release was applied %v after its commit, before the delay of %v", held, delay)
		}
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

// attachingDataplane is historyDataplane that counts the attaches and
// detaches of each host interface.
type attachingDataplane struct {
	historyDataplane
	attaches, detaches map[string]int
}

func (d *attachingDataplane) Attach(hostIf string) error   { return d.count(&d.attaches, hostIf) }
func (d *attachingDataplane) Detach(hostIf string) error   { return d.count(&d.detaches, hostIf) }
func (d *attachingDataplane) attachesOf(hostIf string) int { return d.countOf(d.attaches, hostIf) }
func (d *attachingDataplane) detachesOf(hostIf string) int { return d.countOf(d.detaches, hostIf) }

func (d *attachingDataplane) count(m *map[string]int, hostIf string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[hostIf]++
	return nil
}

func (d *attachingDataplane) countOf(m map[string]int, hostIf string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return m[hostIf]
}

// TestRewiredEndpointIsAttachedAgain: another ADD of an attachment makes
// its host link anew under the same name, without filters. Whether its
// pod was DELed first or the ADD repeated over a Ready endpoint, and no
// apply came in between (a release held back, or Run busy), the apply
// that confirms it attaches the link again and calls the dataplane,
// although the compiled state is the one applied last: the new link's
// ifindex must get the endpoint's state.
func TestRewiredEndpointIsAttachedAgain(t *testing.T) {
	tests := []struct {
		name string
		del  bool
	}{
		{"DEL and ADD again", true},
		{"a repeated ADD", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := seedtest.Store(t)
			dp := &attachingDataplane{attaches: map[string]int{}}
			e := New(st, dp, nil)
			ctx := context.Background()
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if n := dp.attachesOf("ls-a"); n != 1 {
				t.Fatalf("ls-a attached %d times at the start, want 1", n)
			}
			applies := len(dp.states())
			write := func(fn func(*store.Txn) error) uint64 { t.Helper(); return commit(t, st, fn) }
			att := store.Attachment{ContainerID: "c-a", IfName: "eth0"}
			if tt.del {
				write(func(txn *store.Txn) error { _, err := store.ReleaseEndpoint(txn, att); return err })
			}
			again := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.10"))
			again.State, again.OpID = store.EndpointPending, 42
			write(func(txn *store.Txn) error { return store.UpsertEndpoint(txn, again) })
			ready := *again
			ready.State = store.EndpointReady
			rev := write(func(txn *store.Txn) error { return store.UpsertEndpoint(txn, &ready) })
			if err := e.EnforceEndpoint(ctx, "ls-a", rev); err != nil {
				t.Fatal(err)
			}
			if n := dp.attachesOf("ls-a"); n != 2 {
				t.Errorf("ls-a attached %d times, want 2: the re-wired link was not attached again", n)
			}
			if n := len(dp.states()); n != applies+1 {
				t.Errorf("%d applies after the re-wiring, want %d: the dataplane was not called", n-applies, 1)
			}
		})
	}
}

// TestRewiringKeepsTheOldLinkClosed: a repeated ADD over a Ready endpoint
// makes it Pending; the apply of that leaves the endpoint's state out but
// keeps its old link attached (it fails closed until the ADD deletes it)
// instead of detaching it (which would let everything through). The
// confirm attaches the new link; an ADD rolled back instead gets its
// endpoint detached.
func TestRewiringKeepsTheOldLinkClosed(t *testing.T) {
	for _, confirmed := range []bool{true, false} {
		t.Run(fmt.Sprintf("confirmed %v", confirmed), func(t *testing.T) {
			st := seedtest.Store(t)
			dp := &attachingDataplane{attaches: map[string]int{}}
			e := New(st, dp, nil)
			ctx := context.Background()
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			again := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.10"))
			again.State, again.OpID = store.EndpointPending, 42
			commit(t, st, func(txn *store.Txn) error { return store.UpsertEndpoint(txn, again) })
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := lastEndpoints(&dp.historyDataplane); got["ls-a"] || !got["ls-b"] {
				t.Errorf("applied endpoints %v while ls-a is Pending, want ls-b alone", got)
			}
			if n := dp.detachesOf("ls-a"); n != 0 {
				t.Errorf("ls-a detached %d times while an ADD wires it anew, want 0", n)
			}
			if confirmed {
				ready := *again
				ready.State = store.EndpointReady
				rev := commit(t, st, func(txn *store.Txn) error { return store.UpsertEndpoint(txn, &ready) })
				if err := e.EnforceEndpoint(ctx, "ls-a", rev); err != nil {
					t.Fatal(err)
				}
				if n := dp.attachesOf("ls-a"); n != 2 {
					t.Errorf("ls-a attached %d times, want 2", n)
				}
				return
			}
			commit(t, st, func(txn *store.Txn) error {
				_, err := store.ReleaseEndpoint(txn, store.Attachment{ContainerID: "c-a", IfName: "eth0"})
				return err
			})
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if n := dp.detachesOf("ls-a"); n != 1 || e.Enforced("ls-a") {
				t.Errorf("ls-a detached %d times, enforced %v after its ADD was rolled back, want once and not enforced", n, e.Enforced("ls-a"))
			}
		})
	}
}
