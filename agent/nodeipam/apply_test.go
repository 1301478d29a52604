package nodeipam

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/store"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Two /29 blocks: six usable addresses each, b0 filled first.
const (
	b0 = "10.244.0.0/29"
	b1 = "10.244.0.8/29"
)

// spec is a NodeIPAM owned by uid at generation gen, assigning blocks and
// marking marked for release.
func spec(uid string, gen int64, blocks []string, marked ...string) *v1alpha1.NodeIPAM {
	n := v1alpha1.NewNodeIPAM("node-a", "node-uid")
	n.UID, n.Generation = types.UID(uid), gen
	for _, b := range blocks {
		n.Spec.Blocks = append(n.Spec.Blocks, v1alpha1.Block{CIDR: v1alpha1.CIDR(b), Pool: "default"})
	}
	for _, m := range marked {
		n.Spec.Releases = append(n.Spec.Releases, v1alpha1.ReleaseMark{CIDR: v1alpha1.CIDR(m), State: v1alpha1.MarkedForRelease})
	}
	return n
}

// apply applies obj (nil: no usable NodeIPAM) in one durable transaction,
// running during (if set) inside it before the commit, and returns the
// events it logged.
func (n *node) apply(t *testing.T, obj *v1alpha1.NodeIPAM, pods *endpoints.PodList, during func()) []event {
	t.Helper()
	var a *assignment
	if obj != nil {
		a, _ = assignmentOf(obj)
	}
	txn := n.st.WriteTxn()
	defer txn.Abort()
	events, err := applyTxn(txn, n.svc, a, pods, "no usable NodeIPAM")
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if during != nil {
		during()
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	return events
}

// answer is the agent's answer to obj's mark on cidr, as statusOf writes it.
func (n *node) answer(t *testing.T, obj *v1alpha1.NodeIPAM, cidr string) v1alpha1.ReleaseState {
	t.Helper()
	st, err := statusOf(n.st.ReadTxn(), obj, metav1.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Releases {
		if string(a.CIDR) == cidr {
			return a.State
		}
	}
	return ""
}

// fill allocates every address of b0.
func (n *node) fill(t *testing.T) {
	t.Helper()
	for i := range 6 {
		p := pod{"default", "filler-" + string(rune('a'+i)), "uid-filler-" + string(rune('a'+i))}
		if a := n.mustAdd(t, "filler"+string(rune('a'+i)), p); !netip.MustParsePrefix(b0).Contains(a) {
			t.Fatalf("filler got %s, outside %s", a, b0)
		}
	}
}

func hasEvent(events []event, level slog.Level, substr string) bool {
	for _, e := range events {
		if e.level == level && strings.Contains(e.msg, substr) {
			return true
		}
	}
	return false
}

// TestSeed004HandshakeIsOneTransaction replays, on the store alone, an ADD
// racing the operator's mark on a block: whichever commits first, the
// agent never answers ready-for-release for a block that holds an address,
// and never allocates from a block it answered ready for.
func TestSeed004HandshakeIsOneTransaction(t *testing.T) {
	tests := []struct {
		name string
		// race runs the ADD at its point of the interleaving; it returns
		// the ADD's outcome.
		race       func(t *testing.T, n *node, marked *v1alpha1.NodeIPAM) (netip.Addr, error)
		wantAnswer v1alpha1.ReleaseState
	}{{
		name: "ADD commits before the handshake reads the block",
		race: func(t *testing.T, n *node, marked *v1alpha1.NodeIPAM) (netip.Addr, error) {
			a, err := n.add(t, "racer", pod{"default", "racer", "uid-racer"})
			n.apply(t, marked, nil, nil)
			return a, err
		},
		wantAnswer: v1alpha1.DoNotRelease,
	}, {
		name: "ADD arrives while the handshake transaction is open",
		race: func(t *testing.T, n *node, marked *v1alpha1.NodeIPAM) (netip.Addr, error) {
			type result struct {
				a   netip.Addr
				err error
			}
			done := make(chan result, 1)
			n.apply(t, marked, nil, func() {
				// The ADD blocks on the store's write lock until the
				// handshake commits.
				go func() {
					a, err := n.add(t, "racer", pod{"default", "racer", "uid-racer"})
					done <- result{a, err}
				}()
			})
			r := <-done
			return r.a, r.err
		},
		wantAnswer: v1alpha1.ReadyForRelease,
	}, {
		name: "ADD arrives between the quarantine and the answer",
		race: func(t *testing.T, n *node, marked *v1alpha1.NodeIPAM) (netip.Addr, error) {
			n.apply(t, marked, nil, nil)
			return n.add(t, "racer", pod{"default", "racer", "uid-racer"})
		},
		wantAnswer: v1alpha1.ReadyForRelease,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := openNode(t, t.TempDir())
			n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
			n.fill(t)
			marked := spec("ipam-1", 2, []string{b0, b1}, b1)

			addr, err := tc.race(t, n, marked)
			got := n.answer(t, marked, b1)
			if got != tc.wantAnswer {
				t.Errorf("answer %q, want %q", got, tc.wantAnswer)
			}
			used := n.countIn(t, b1)
			switch got {
			case v1alpha1.ReadyForRelease:
				if used != 0 {
					t.Fatalf("ready-for-release with %d addresses of %s allocated", used, b1)
				}
				if b := n.block(t, b1); b.State != store.BlockQuarantined || !n.pool(t, b1).Draining {
					t.Fatalf("ready-for-release but block %s is %v", b1, b.State)
				}
				// b0 is full and b1 drains: the ADD fails, saying so.
				if api.CodeOf(err) != api.CodePoolExhausted || !strings.Contains(err.Error(), b1) {
					t.Fatalf("ADD after the quarantine: %v, %v; want a pool-exhausted error naming %s", addr, err, b1)
				}
			case v1alpha1.DoNotRelease:
				if err != nil || !netip.MustParsePrefix(b1).Contains(addr) || used != 1 {
					t.Fatalf("ADD before the handshake: %v, %v (%d used in %s)", addr, err, used, b1)
				}
			}
		})
	}
}

// TestSeed004QuarantineSurvivesRestart: the agent quarantined a block and
// answered ready-for-release; it restarts before the operator takes the
// block. From the state file alone, before it reads its NodeIPAM again,
// it allocates nothing from any block, and the quarantine holds after.
func TestSeed004QuarantineSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir)
	n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
	first := n.mustAdd(t, "c1", pod{"default", "web-0", "uid-web-0"})
	marked := spec("ipam-1", 2, []string{b0, b1}, b1)
	n.apply(t, marked, nil, nil)
	if got := n.answer(t, marked, b1); got != v1alpha1.ReadyForRelease {
		t.Fatalf("answer %q before the restart", got)
	}
	n.close()

	m := openNode(t, dir)
	if err := loadBlocks(m.st, mustLoad(t, m)); err != nil {
		t.Fatal(err)
	}
	if b := m.block(t, b1); b == nil || b.State != store.BlockQuarantined {
		t.Fatalf("after restart block %s is %+v, want quarantined", b1, b)
	}
	for _, name := range []string{b0, b1} {
		if p := m.pool(t, name); p == nil || !p.Draining {
			t.Errorf("pool %s before the NodeIPAM is read: %+v, want draining", name, p)
		}
	}
	if _, err := m.add(t, "early", pod{"default", "early", "uid-early"}); api.CodeOf(err) != api.CodePoolExhausted {
		t.Fatalf("ADD before the NodeIPAM is read: %v, want pool exhausted", err)
	}

	m.apply(t, marked, nil, nil)
	if got := m.answer(t, marked, b1); got != v1alpha1.ReadyForRelease {
		t.Fatalf("answer %q after the restart", got)
	}
	for i := range 5 {
		a := m.mustAdd(t, "after"+string(rune('0'+i)), pod{"default", "after", "uid-after-" + string(rune('0'+i))})
		if a == first || !netip.MustParsePrefix(b0).Contains(a) {
			t.Fatalf("ADD after restart got %s: want a free address of %s", a, b0)
		}
	}
	// The operator takes the block back: it leaves the store.
	released := spec("ipam-1", 3, []string{b0})
	released.Spec.Releases = []v1alpha1.ReleaseMark{{CIDR: b1, State: v1alpha1.Released}}
	events := m.apply(t, released, nil, nil)
	if m.block(t, b1) != nil || m.pool(t, b1) != nil || !hasEvent(events, slog.LevelInfo, "took back") {
		t.Fatalf("released block still held: %+v %+v %v", m.block(t, b1), m.pool(t, b1), events)
	}
	if got := m.answer(t, released, b1); got != "" {
		t.Errorf("answer %q to a released mark, want none", got)
	}
}

func mustLoad(t *testing.T, n *node) []*store.Block {
	t.Helper()
	blocks, err := n.db.LoadBlocks()
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestRemovedBlockKeepsLiveAddresses: a block leaves spec.blocks while a
// live pod holds an address of it. The agent keeps it (retired, draining)
// and says so; once the pod is gone by a pod list taken after its ADD,
// the endpoint and the block leave the store in one transaction.
func TestRemovedBlockKeepsLiveAddresses(t *testing.T) {
	n := openNode(t, t.TempDir())
	n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
	web := pod{"default", "web-0", "uid-web-0"}
	addr := n.mustAdd(t, "c1", web)

	events := n.apply(t, spec("ipam-1", 2, []string{b1}), nil, nil)
	if b := n.block(t, b0); b == nil || b.State != store.BlockRetired || !n.pool(t, b0).Draining {
		t.Fatalf("block %s after removal: %+v", b0, b)
	}
	if !hasEvent(events, slog.LevelError, "holds addresses of live endpoints") {
		t.Errorf("removal of a block in use was not reported as an error: %v", events)
	}
	if got := n.allocated(t)[addr]; got != web.uid {
		t.Fatalf("%s of the live pod was dropped", addr)
	}
	if a := n.mustAdd(t, "c2", pod{"default", "web-1", "uid-web-1"}); !netip.MustParsePrefix(b1).Contains(a) {
		t.Fatalf("ADD got %s from the retired block", a)
	}

	// A pod list taken before the ADD of web-0 proves nothing.
	stale := &endpoints.PodList{Revision: 1}
	n.apply(t, spec("ipam-1", 2, []string{b1}), stale, nil)
	if n.allocated(t)[addr] != web.uid {
		t.Fatal("an endpoint was released on a pod list older than it")
	}
	// web-0 lives on in a current list: still kept.
	live := &endpoints.PodList{Revision: n.svc.Revision(), Pods: []endpoints.Pod{{Namespace: "default", Name: "web-0", UID: web.uid, IPs: []netip.Addr{addr}}}}
	n.apply(t, spec("ipam-1", 2, []string{b1}), live, nil)
	if n.block(t, b0) == nil {
		t.Fatal("block dropped while its pod lives")
	}
	// web-0 is gone: its endpoint and the block go together.
	gone := &endpoints.PodList{Revision: n.svc.Revision(), Pods: []endpoints.Pod{{Namespace: "default", Name: "web-1", UID: "uid-web-1"}}}
	before := store.Revision(n.st.ReadTxn(), "")
	n.apply(t, spec("ipam-1", 2, []string{b1}), gone, nil)
	read := n.st.ReadTxn()
	if n.block(t, b0) != nil || n.pool(t, b0) != nil || n.allocated(t)[addr] != "" {
		t.Fatal("orphaned endpoint and empty block not dropped")
	}
	if rev := store.Revision(read, ""); rev != before+1 {
		t.Errorf("dropping took revisions %d..%d, want one transaction", before, rev)
	}
}

// TestOverlappingBlockIsNotMerged: an address held in one block must not
// arrive from another block that overlaps it.
func TestOverlappingBlockIsNotMerged(t *testing.T) {
	n := openNode(t, t.TempDir())
	n.apply(t, spec("ipam-1", 1, []string{b0}), nil, nil)
	n.mustAdd(t, "c1", pod{"default", "web-0", "uid-web-0"})

	const wide = "10.244.0.0/28" // b0 and b1 in one
	events := n.apply(t, spec("ipam-1", 2, []string{wide}), nil, nil)
	if b := n.block(t, wide); b == nil || b.State != store.BlockOverlapping || !n.pool(t, wide).Draining {
		t.Fatalf("overlapping block: %+v", b)
	}
	if !hasEvent(events, slog.LevelError, "overlaps") {
		t.Errorf("overlap not reported as an error: %v", events)
	}
	if _, err := n.add(t, "c2", pod{"default", "web-1", "uid-web-1"}); api.CodeOf(err) != api.CodePoolExhausted {
		t.Fatalf("ADD while the only assigned block overlaps a held one: %v, want pool exhausted", err)
	}

	// Once web-0 is deleted the old block goes, and the new one is used.
	n.del(t, "c1")
	n.apply(t, spec("ipam-1", 2, []string{wide}), nil, nil)
	if n.block(t, b0) != nil || n.block(t, wide).State != store.BlockActive {
		t.Fatalf("after the old block emptied: %+v, %+v", n.block(t, b0), n.block(t, wide))
	}
	if a := n.mustAdd(t, "c3", pod{"default", "web-2", "uid-web-2"}); !netip.MustParsePrefix(wide).Contains(a) {
		t.Fatalf("ADD got %s, outside %s", a, wide)
	}
}

// TestSeed003NewNodeIPAMIsANewAssignment: blocks of a NodeIPAM that stops
// being this node's are given up (kept only for live addresses), and the
// same CIDR assigned by its replacement is a new block whose remaining
// addresses still belong to their endpoints.
func TestSeed003NewNodeIPAMIsANewAssignment(t *testing.T) {
	n := openNode(t, t.TempDir())
	n.apply(t, spec("ipam-old", 7, []string{b0, b1}, b1), nil, nil)
	old := n.mustAdd(t, "c1", pod{"default", "web-0", "uid-web-0"})
	if n.block(t, b1).State != store.BlockQuarantined {
		t.Fatal("setup: b1 not quarantined")
	}

	events := n.apply(t, nil, nil, nil)
	if b := n.block(t, b0); b == nil || b.State != store.BlockRetired {
		t.Fatalf("block %s of the stale NodeIPAM: %+v, want retired", b0, b)
	}
	if n.block(t, b1) != nil {
		t.Fatal("empty block of the stale NodeIPAM kept")
	}
	if !hasEvent(events, slog.LevelWarn, "no longer assigned") {
		t.Errorf("giving up the stale blocks was not logged: %v", events)
	}
	if _, err := n.add(t, "c2", pod{"default", "web-1", "uid-web-1"}); api.CodeOf(err) != api.CodePoolExhausted {
		t.Fatalf("ADD with no usable NodeIPAM: %v, want pool exhausted", err)
	}

	// The replacement assigns b0 again, at generation 1, lower than the
	// stale object's: a new object, not an old spec.
	events = n.apply(t, spec("ipam-new", 1, []string{b0}), nil, nil)
	b := n.block(t, b0)
	if b.Owner != "ipam-new" || b.State != store.BlockActive || n.pool(t, b0).Draining {
		t.Fatalf("block %s from the replacement: %+v", b0, b)
	}
	if !hasEvent(events, slog.LevelInfo, "assigned again by a new NodeIPAM") {
		t.Errorf("re-assignment not logged: %v", events)
	}
	if n.allocated(t)[old] != "uid-web-0" {
		t.Fatal("the address of web-0 was dropped")
	}
	if a := n.mustAdd(t, "c2", pod{"default", "web-1", "uid-web-1"}); a == old {
		t.Fatalf("%s handed out twice", a)
	}
}

// TestMarkWithdrawnLiftsQuarantine: the operator may withdraw a mark after
// a ready answer; the block is allocated from again, and a new mark is
// answered afresh.
func TestMarkWithdrawnLiftsQuarantine(t *testing.T) {
	n := openNode(t, t.TempDir())
	n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
	n.fill(t)
	n.apply(t, spec("ipam-1", 2, []string{b0, b1}, b1), nil, nil)
	if _, err := n.add(t, "x", pod{"default", "x", "uid-x"}); !errors.As(err, new(*api.Error)) {
		t.Fatalf("ADD into a quarantined block: %v", err)
	}
	events := n.apply(t, spec("ipam-1", 3, []string{b0, b1}), nil, nil)
	if !hasEvent(events, slog.LevelInfo, "withdrawn") || n.pool(t, b1).Draining {
		t.Fatalf("quarantine not lifted: %v", events)
	}
	n.mustAdd(t, "x", pod{"default", "x", "uid-x"})
	again := spec("ipam-1", 4, []string{b0, b1}, b1)
	n.apply(t, again, nil, nil)
	if got := n.answer(t, again, b1); got != v1alpha1.DoNotRelease {
		t.Fatalf("answer to the new mark: %q", got)
	}
}

// drainSpec is spec with drain marks (the blocks left their IPPool) on
// drained.
func drainSpec(uid string, gen int64, blocks []string, drained ...string) *v1alpha1.NodeIPAM {
	n := spec(uid, gen, blocks, drained...)
	for i := range n.Spec.Releases {
		n.Spec.Releases[i].Drain = true
	}
	return n
}

// TestDrainMarkQuarantinesBusyBlock: the pool was shrunk under b0, which
// holds six pods. The drain mark quarantines b0 at once and durably; the
// pods keep their addresses, new ADDs go to b1, and the answer is
// do-not-release until the last address of b0 is released (by DEL, CNI GC
// and the orphan reconcile here), then ready-for-release, to the same
// spec: no new apply is needed.
func TestDrainMarkQuarantinesBusyBlock(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir)
	n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
	n.fill(t)
	before := n.allocated(t)

	drained := drainSpec("ipam-1", 2, []string{b0, b1}, b0)
	events := n.apply(t, drained, nil, nil)
	if b := n.block(t, b0); b.State != store.BlockQuarantined || !n.pool(t, b0).Draining {
		t.Fatalf("drained block %s: %+v, pool %+v; want quarantined and draining", b0, b, n.pool(t, b0))
	}
	if !hasEvent(events, slog.LevelInfo, "outside its IPPool") {
		t.Errorf("the drain was not logged: %v", events)
	}
	if got := n.answer(t, drained, b0); got != v1alpha1.DoNotRelease {
		t.Fatalf("answer with six pods in %s: %q, want do-not-release", b0, got)
	}
	for addr, uid := range before {
		if n.allocated(t)[addr] != uid {
			t.Fatalf("the drain took %s from %s", addr, uid)
		}
	}
	web := pod{"default", "web-0", "uid-web-0"}
	webAddr := n.mustAdd(t, "web0", web)
	if !netip.MustParsePrefix(b1).Contains(webAddr) {
		t.Fatalf("ADD after the drain got %s, want an address of %s", webAddr, b1)
	}

	// The quarantine is on disk: an agent restarted now keeps it.
	n.close()
	n = openNode(t, dir)
	if err := loadBlocks(n.st, mustLoad(t, n)); err != nil {
		t.Fatal(err)
	}
	n.apply(t, drained, nil, nil)
	if b := n.block(t, b0); b.State != store.BlockQuarantined || !n.pool(t, b0).Draining {
		t.Fatalf("drained block %s after a restart: %+v", b0, b)
	}

	// The pods go, by every release path. The answer is recomputed from
	// the store each time, under the same spec.
	for _, c := range []string{"fillera", "fillerb", "fillerc", "fillerd"} {
		n.del(t, c)
		if got := n.answer(t, drained, b0); got != v1alpha1.DoNotRelease {
			t.Fatalf("answer after DEL %s, with %d addresses left in %s: %q", c, n.countIn(t, b0), b0, got)
		}
	}
	valid := []api.Attachment{{ContainerID: "fillerf", IfName: "eth0"}, {ContainerID: "web0", IfName: "eth0"}}
	if _, err := n.svc.GC(t.Context(), api.GCRequest{Valid: valid}); err != nil {
		t.Fatal(err)
	}
	if got := n.answer(t, drained, b0); got != v1alpha1.DoNotRelease || n.countIn(t, b0) != 1 {
		t.Fatalf("after CNI GC: answer %q with %d left in %s", got, n.countIn(t, b0), b0)
	}
	live := endpoints.PodList{Revision: n.svc.Revision(), Pods: []endpoints.Pod{{Namespace: "default", Name: "web-0", UID: web.uid, IPs: []netip.Addr{webAddr}}}}
	if _, err := n.svc.ReleaseOrphans(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	if used := n.countIn(t, b0); used != 0 {
		t.Fatalf("%d addresses left in %s after the orphan reconcile", used, b0)
	}
	if got := n.answer(t, drained, b0); got != v1alpha1.ReadyForRelease {
		t.Fatalf("answer once %s is empty: %q, want ready-for-release", b0, got)
	}
	if n.allocated(t)[webAddr] != web.uid {
		t.Fatalf("web-0 lost %s", webAddr)
	}
}

// TestDrainMarkRacesAdd: an ADD racing the drain mark of b0, which holds
// one pod, either commits first (and keeps its address in b0) or comes
// after the quarantine and lands in b1. Once the drain has committed, no
// ADD gets an address of b0, and with b1 full the refusal names b0.
func TestDrainMarkRacesAdd(t *testing.T) {
	tests := []struct {
		name string
		race func(t *testing.T, n *node, drained *v1alpha1.NodeIPAM) netip.Addr
		// inB0 is whether the racing ADD may land in b0.
		inB0 bool
	}{{
		name: "ADD commits before the drain",
		race: func(t *testing.T, n *node, drained *v1alpha1.NodeIPAM) netip.Addr {
			a := n.mustAdd(t, "racer", pod{"default", "racer", "uid-racer"})
			n.apply(t, drained, nil, nil)
			return a
		},
		inB0: true,
	}, {
		name: "ADD arrives while the drain transaction is open",
		race: func(t *testing.T, n *node, drained *v1alpha1.NodeIPAM) netip.Addr {
			done := make(chan netip.Addr, 1)
			n.apply(t, drained, nil, func() {
				go func() {
					a, err := n.add(t, "racer", pod{"default", "racer", "uid-racer"})
					if err != nil {
						t.Errorf("racing ADD: %v", err)
					}
					done <- a
				}()
			})
			return <-done
		},
	}, {
		name: "ADD after the drain",
		race: func(t *testing.T, n *node, drained *v1alpha1.NodeIPAM) netip.Addr {
			n.apply(t, drained, nil, nil)
			return n.mustAdd(t, "racer", pod{"default", "racer", "uid-racer"})
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := openNode(t, t.TempDir())
			n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
			first := n.mustAdd(t, "first", pod{"default", "first", "uid-first"})
			if !netip.MustParsePrefix(b0).Contains(first) {
				t.Fatalf("setup: first pod got %s, outside %s", first, b0)
			}
			drained := drainSpec("ipam-1", 2, []string{b0, b1}, b0)

			addr := tc.race(t, n, drained)
			if inB0 := netip.MustParsePrefix(b0).Contains(addr); inB0 && !tc.inB0 {
				t.Fatalf("racing ADD got %s of the draining %s", addr, b0)
			}
			if got := n.answer(t, drained, b0); got != v1alpha1.DoNotRelease {
				t.Fatalf("answer with pods in %s: %q", b0, got)
			}
			// Every later ADD goes to b1 until it is full, then fails
			// naming the draining b0.
			for i := 0; ; i++ {
				a, err := n.add(t, fmt.Sprintf("later%d", i), pod{"default", "later", fmt.Sprintf("uid-later-%d", i)})
				if err != nil {
					if api.CodeOf(err) != api.CodePoolExhausted || !strings.Contains(err.Error(), b0) {
						t.Fatalf("ADD with b1 full: %v; want pool exhausted naming the draining %s", err, b0)
					}
					break
				}
				if !netip.MustParsePrefix(b1).Contains(a) {
					t.Fatalf("ADD %d after the drain got %s, outside %s", i, a, b1)
				}
			}
			if n.allocated(t)[first] != "uid-first" {
				t.Fatalf("the first pod lost %s", first)
			}
		})
	}
}

// TestExcessMarkOnBusyBlockUnchanged: an excess mark (no drain) on a block
// holding a pod leaves it allocated from, and the answer stays
// do-not-release under that spec even once the block empties: the
// operator withdraws an excess mark the agent refuses, and only a new
// mark is answered afresh.
func TestExcessMarkOnBusyBlockUnchanged(t *testing.T) {
	n := openNode(t, t.TempDir())
	n.apply(t, spec("ipam-1", 1, []string{b0, b1}), nil, nil)
	n.mustAdd(t, "first", pod{"default", "first", "uid-first"})
	marked := spec("ipam-1", 2, []string{b0, b1}, b0)
	n.apply(t, marked, nil, nil)
	if b := n.block(t, b0); b.State != store.BlockActive || n.pool(t, b0).Draining {
		t.Fatalf("block %s under an excess mark with a pod: %+v, want active", b0, b)
	}
	if a := n.mustAdd(t, "second", pod{"default", "second", "uid-second"}); !netip.MustParsePrefix(b0).Contains(a) {
		t.Fatalf("ADD got %s, want %s, still allocated from", a, b0)
	}
	n.del(t, "first")
	n.del(t, "second")
	if got := n.answer(t, marked, b0); got != v1alpha1.DoNotRelease {
		t.Fatalf("answer to the excess mark once %s emptied: %q, want do-not-release until a new mark", b0, got)
	}
}
