package enforcer

import (
	"context"
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/test/seedtest"
)

// invalidatingDataplane counts Invalidate calls.
type invalidatingDataplane struct {
	*setDataplane
	invalidated int
}

func (d *invalidatingDataplane) Invalidate() { d.invalidated++ }

// A resync must make a dataplane that diffs against its own memory read
// the real state back; otherwise drift behind lockstep's back survives it.
func TestResyncInvalidatesDiffingDataplanes(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	dp := &invalidatingDataplane{setDataplane: newSetDataplane()}
	e := New(st, dp, nil)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if dp.invalidated != 0 {
		t.Fatalf("Sync invalidated the dataplane %d times; only Resync should", dp.invalidated)
	}
	if err := e.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if dp.invalidated != 1 {
		t.Fatalf("Resync invalidated the dataplane %d times, want 1", dp.invalidated)
	}
}

// hookDataplane keeps each endpoint's hooks like the eBPF dataplane does,
// and lets a test remove them behind the enforcer's back.
type hookDataplane struct {
	*setDataplane
	hooked  map[string]bool
	attachs map[string]int
}

func (d *hookDataplane) Attach(hostIf string) error {
	d.hooked[hostIf] = true
	d.attachs[hostIf]++
	return nil
}

func (d *hookDataplane) Attached(hostIf string) (bool, error) { return d.hooked[hostIf], nil }

// newHookTest applies the seed's store to a hookDataplane once.
func newHookTest(t *testing.T) (*store.Store, *hookDataplane, *Enforcer) {
	t.Helper()
	st := seedtest.Store(t)
	dp := &hookDataplane{setDataplane: newSetDataplane(), hooked: map[string]bool{}, attachs: map[string]int{}}
	e := New(st, dp, nil)
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st, dp, e
}

// A resync attaches again an endpoint whose hooks were removed behind
// lockstep's back, and only that one; a Sync does not look.
func TestResyncAttachesMissingHooks(t *testing.T) {
	_, dp, e := newHookTest(t)
	ctx := context.Background()
	if !dp.hooked["ls-a"] || !dp.hooked["ls-b"] {
		t.Fatalf("after the first apply, hooks on %v; want ls-a and ls-b", dp.hooked)
	}
	delete(dp.hooked, "ls-a") // tc filter del
	if err := e.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !dp.hooked["ls-a"] {
		t.Error("a resync left ls-a without its hooks")
	}
	if dp.attachs["ls-a"] != 2 || dp.attachs["ls-b"] != 1 {
		t.Errorf("attachments %v; want ls-a twice (again by the resync), ls-b once", dp.attachs)
	}
	if got := e.Reattached(); got != 1 {
		t.Errorf("Reattached() = %d, want 1", got)
	}
	if !e.Enforced("ls-a") {
		t.Error("ls-a not enforced after the resync")
	}
}

// A resync while a release is held back, or while another ADD wires an
// endpoint anew, does not take the released endpoint (its link gone) or
// the re-wired one (a new link, not attached yet) for one whose hooks
// were removed behind lockstep's back: the apply that follows detaches
// the first and attaches the second.
func TestResyncLeavesReleasedAndRewiredEndpoints(t *testing.T) {
	st, dp, e := newHookTest(t)
	ctx := context.Background()
	commit(t, st, func(txn *store.Txn) error {
		_, err := store.ReleaseEndpoint(txn, store.Attachment{ContainerID: "c-b", IfName: "eth0"})
		return err
	})
	delete(dp.hooked, "ls-b") // its link went with the DEL
	rewired := seedtest.Endpoint("a", netip.MustParseAddr("10.244.0.10"))
	rewired.OpID = 42
	commit(t, st, func(txn *store.Txn) error { return store.UpsertEndpoint(txn, rewired) })
	delete(dp.hooked, "ls-a") // a new link, without the filters
	if err := e.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.Reattached(); got != 0 {
		t.Errorf("Reattached() = %d after a resync with a release and a re-wiring, want 0", got)
	}
	if dp.attachs["ls-a"] != 2 || !dp.hooked["ls-a"] || !e.Enforced("ls-a") {
		t.Errorf("ls-a attached %d times, hooked %v, enforced %v: want twice, hooked and enforced", dp.attachs["ls-a"], dp.hooked["ls-a"], e.Enforced("ls-a"))
	}
	dp.mu.Lock()
	_, applied := dp.rules["ls-b"]
	dp.mu.Unlock()
	if dp.attachs["ls-b"] != 1 || e.Enforced("ls-b") || applied {
		t.Errorf("ls-b attached %d times, enforced %v, in the dataplane %v: want once, and detached by the resync's apply", dp.attachs["ls-b"], e.Enforced("ls-b"), applied)
	}
}
