package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeReplacedNodeGetsFreshNodeIPAM is seed 003, the operator's half:
// node a is deleted and re-created under the same name while its old
// NodeIPAM still exists (a finalizer stands in for a garbage collector
// that lags). The operator deletes the old object rather than reuse it,
// says why, hands its block to nobody while it exists, and gives the new
// node a NodeIPAM owned by the new UID once it is gone; the old block is
// cut again only after the new node's agent has reported what it holds.
func TestKubeReplacedNodeGetsFreshNodeIPAM(t *testing.T) {
	cl := startCluster(t)
	inv := cl.watchInvariants()
	// Two blocks: whatever the old NodeIPAM holds is the only other one.
	cl.createPool("v4", 26, "10.0.0.0/25")
	oldUID := cl.createNode("a")
	o := opts{leaderElect: true, minFree: 16, delay: time.Minute}
	first := cl.startReplica("first", o)
	cl.eventually(30*time.Second, "node a has a block", cl.hasBlock("a"))
	first.stop(t)
	old := cl.nodeIPAM("a")
	if !old.ControlledBy(oldUID) {
		t.Fatalf("nodeipam a is not controlled by node a (%s): %v", oldUID, old.OwnerReferences)
	}
	oldBlock := old.Spec.Blocks[0].CIDR

	// The garbage collector is late: the old object outlives its Node.
	const hold = "test.lockstep.dev/hold"
	old.Finalizers = append(old.Finalizers, hold)
	if _, err := cl.c.lockstep.NodeIPAMs().Update(t.Context(), old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.deleteNode("a")
	newUID := cl.createNode("a")
	cl.createNode("b")

	second := cl.startReplica("second", o)
	cl.eventually(30*time.Second, "node b has a block", cl.hasBlock("b"))
	cl.eventually(10*time.Second, "the stale nodeipam a is being deleted", func() (bool, string) {
		n := cl.nodeIPAM("a")
		return n != nil && n.DeletionTimestamp != nil, fmt.Sprintf("%v", n)
	})
	if got := blockNames(cl.nodeIPAM("b")); slices.Contains(got, string(oldBlock)) {
		t.Fatalf("node b got %s, still held by the stale nodeipam a", oldBlock)
	}
	logs := second.logs.String()
	if !strings.Contains(logs, "deleting stale nodeipam") || !strings.Contains(logs, "owner_uid="+string(oldUID)) ||
		!strings.Contains(logs, "node_uid="+string(newUID)) {
		t.Errorf("the operator did not log why it deleted the stale nodeipam (owner %s, node %s):\n%s", oldUID, newUID, logs)
	}
	cl.eventually(10*time.Second, "the pool reports itself exhausted", func() (bool, string) {
		c := metav1.FindStatusCondition(cl.getPool("v4").Status.Conditions, v1alpha1.IPPoolExhausted)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprint(c)
	})

	// While the stale object exists, nothing changes: its block stays
	// with it, and node a gets nothing (its name is taken).
	time.Sleep(2 * time.Second)
	n := cl.nodeIPAM("a")
	if n.UID != old.UID || !slices.Equal(blockNames(n), []string{string(oldBlock)}) {
		t.Fatalf("while stale, nodeipam a became uid %s blocks %v", n.UID, blockNames(n))
	}

	// The garbage collector catches up.
	n.Finalizers = nil
	if _, err := cl.c.lockstep.NodeIPAMs().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.eventually(30*time.Second, "node a has a fresh nodeipam owned by its new UID", func() (bool, string) {
		n := cl.nodeIPAM("a")
		return n != nil && n.UID != old.UID && n.ControlledBy(newUID), fmt.Sprintf("%v", n)
	})
	// The old block stays reserved until the new node's agent has
	// reported on the replacement: it may still hold addresses in it.
	time.Sleep(time.Second)
	if got := blockNames(cl.nodeIPAM("a")); len(got) != 0 {
		t.Fatalf("the replacement got %v before its agent reported", got)
	}
	cl.answer("a", current, nil, nil)
	cl.eventually(30*time.Second, "node a's fresh nodeipam gets the block once its agent has reported", func() (bool, string) {
		n := cl.nodeIPAM("a")
		return n.ControlledBy(newUID) && slices.Equal(blockNames(n), []string{string(oldBlock)}), fmt.Sprint(blockNames(n))
	})
	if p := cl.getPool("v4"); p.Status.AllocatedBlocks != 2 {
		cl.eventually(10*time.Second, "the pool counts 2 allocated blocks", func() (bool, string) {
			p := cl.getPool("v4")
			return p.Status.AllocatedBlocks == 2, fmt.Sprint(p.Status.AllocatedBlocks)
		})
	}
	inv.check(t)
}

// agentSim answers the release handshake for one NodeIPAM the way the
// test says, by writing its status with UpdateStatus.
func (cl *cluster) answer(name string, observed func(gen int64) int64, states map[v1alpha1.CIDR]v1alpha1.ReleaseState, alloc map[v1alpha1.CIDR]int32) *v1alpha1.NodeIPAM {
	cl.t.Helper()
	return cl.report(name, func(n *v1alpha1.NodeIPAM) {
		n.Status.ObservedGeneration = observed(n.Generation)
		usage(n, alloc)
		n.Status.Releases = nil
		for cidr, s := range states {
			n.Status.Releases = append(n.Status.Releases, v1alpha1.ReleaseAnswer{CIDR: cidr, State: s, Since: metav1.Now()})
		}
	})
}

func current(gen int64) int64 { return gen }

// marked returns the block of NodeIPAM name marked for release, if any.
func (cl *cluster) marked(name string) (v1alpha1.CIDR, bool) {
	for _, m := range cl.nodeIPAM(name).Spec.Releases {
		if m.State == v1alpha1.MarkedForRelease {
			return m.CIDR, true
		}
	}
	return "", false
}

// TestKubeRestartMidHandshakeNeverReleasesEarly is seed 004, the
// operator's half. Four nodes each get a block marked for release; the
// operator then restarts, losing its timers. After the restart:
//
//   - ready: the agent answers ready-for-release to the current
//     generation. The block goes only after a whole delay from the
//     restart, and the released mark goes once the agent has dropped it.
//   - stale: the agent's ready answer is for an older generation. The
//     block stays until the agent answers again, currently.
//   - refuses: the agent answers do-not-release. The mark is withdrawn.
//   - silent: the agent never answers. The block stays.
func TestKubeRestartMidHandshakeNeverReleasesEarly(t *testing.T) {
	const delay = 3 * time.Second
	cl := startCluster(t)
	inv := cl.watchInvariants()
	cl.createPool("v4", 28, "10.0.0.0/24") // blocks of 16; min-free 16
	names := []string{"ready", "stale", "refuses", "silent"}
	for _, n := range names {
		cl.createNode(n)
	}
	o := opts{leaderElect: true, minFree: 16, delay: delay}
	first := cl.startReplica("first", o)
	for _, n := range names {
		cl.eventually(30*time.Second, "node "+n+" has a block", cl.hasBlock(n))
		// 16 pods on the first block: the node needs a second block...
		b0 := cl.nodeIPAM(n).Spec.Blocks[0].CIDR
		cl.answer(n, current, nil, map[v1alpha1.CIDR]int32{b0: 16})
		cl.eventually(30*time.Second, "node "+n+" has a second block", func() (bool, string) {
			got := blockNames(cl.nodeIPAM(n))
			return len(got) == 2, fmt.Sprint(got)
		})
		// ...then the pods go, and one block is excess.
		cl.answer(n, current, nil, nil)
	}
	for _, n := range names {
		cl.eventually(delay+10*time.Second, "a block of node "+n+" is marked for release", func() (bool, string) {
			_, ok := cl.marked(n)
			return ok, fmt.Sprint(cl.nodeIPAM(n).Spec.Releases)
		})
	}
	_, metrics := first.get(t, "/metrics")
	for series, want := range map[string]float64{
		`lockstep_operator_blocks_assigned_total{pool="v4"}`:   8, // two per node
		`lockstep_operator_handshake_steps_total{step="mark"}`: 4,
	} {
		if v, _ := sample(metrics, series); v != want {
			t.Errorf("first replica: %s = %v, want %v", series, v, want)
		}
	}
	first.stop(t)

	mark := map[string]v1alpha1.CIDR{}
	for _, n := range names {
		mark[n], _ = cl.marked(n)
	}
	cl.answer("ready", current, map[v1alpha1.CIDR]v1alpha1.ReleaseState{mark["ready"]: v1alpha1.ReadyForRelease}, nil)
	cl.answer("stale", func(gen int64) int64 { return gen - 1 }, map[v1alpha1.CIDR]v1alpha1.ReleaseState{mark["stale"]: v1alpha1.ReadyForRelease}, nil)
	cl.answer("refuses", current, map[v1alpha1.CIDR]v1alpha1.ReleaseState{mark["refuses"]: v1alpha1.DoNotRelease}, map[v1alpha1.CIDR]int32{mark["refuses"]: 1})

	restarted := time.Now()
	second := cl.startReplica("second", o)

	cl.eventually(10*time.Second, "the refused mark is withdrawn", func() (bool, string) {
		n := cl.nodeIPAM("refuses")
		return n.Spec.Mark(mark["refuses"]) == nil && n.Spec.Block(mark["refuses"]) != nil, fmt.Sprint(n.Spec)
	})

	// Watch the ready block closely: it must stay for the whole delay.
	var releasedAt time.Time
	for time.Since(restarted) < delay+15*time.Second {
		n := cl.nodeIPAM("ready")
		if n.Spec.Block(mark["ready"]) == nil {
			releasedAt = time.Now()
			if m := n.Spec.Mark(mark["ready"]); m == nil || m.State != v1alpha1.Released {
				t.Errorf("block left spec.blocks without a released mark: %v", n.Spec.Releases)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if releasedAt.IsZero() {
		t.Fatalf("ready block %s never released", mark["ready"])
	}
	if waited := releasedAt.Sub(restarted); waited < delay {
		t.Fatalf("released %s after the restart, before the %s delay had run again", waited, delay)
	} else {
		t.Logf("ready block released %s after the restart (delay %s)", waited.Round(time.Millisecond), delay)
	}

	// The agent drops the released block; the operator forgets its mark.
	cl.answer("ready", current, nil, nil)
	cl.eventually(10*time.Second, "the released mark is forgotten", func() (bool, string) {
		n := cl.nodeIPAM("ready")
		return len(n.Spec.Releases) == 0, fmt.Sprint(n.Spec.Releases)
	})

	// Stale and silent keep their blocks, well past the delay.
	time.Sleep(time.Until(restarted.Add(delay + 2*time.Second)))
	for _, name := range []string{"stale", "silent"} {
		n := cl.nodeIPAM(name)
		if n.Spec.Block(mark[name]) == nil {
			t.Fatalf("node %s lost block %s without a current ready-for-release answer", name, mark[name])
		}
		if m := n.Spec.Mark(mark[name]); m == nil || m.State != v1alpha1.MarkedForRelease {
			t.Errorf("node %s: mark %v, want it still marked-for-release", name, m)
		}
	}

	// A fresh, current answer from the stale agent: now it goes, at once
	// (its timer has long run).
	answered := time.Now()
	cl.answer("stale", current, map[v1alpha1.CIDR]v1alpha1.ReleaseState{mark["stale"]: v1alpha1.ReadyForRelease}, nil)
	cl.eventually(5*time.Second, "the stale node's block goes after its current answer", func() (bool, string) {
		n := cl.nodeIPAM("stale")
		return n.Spec.Block(mark["stale"]) == nil, fmt.Sprint(blockNames(n))
	})
	t.Logf("stale node's block released %s after a current answer", time.Since(answered).Round(time.Millisecond))
	if n := cl.nodeIPAM("silent"); n.Spec.Block(mark["silent"]) == nil {
		t.Errorf("the silent node lost its block")
	}
	_, metrics = second.get(t, "/metrics")
	for series, want := range map[string]float64{
		`lockstep_operator_handshake_steps_total{step="mark"}`:     0, // found marked, not marked again
		`lockstep_operator_handshake_steps_total{step="withdraw"}`: 1, // refuses
		`lockstep_operator_handshake_steps_total{step="release"}`:  2, // ready, stale
		`lockstep_operator_handshake_steps_total{step="forget"}`:   1, // ready
		`lockstep_operator_blocks_released_total{pool="v4"}`:       2,
	} {
		if v, _ := sample(metrics, series); v != want {
			t.Errorf("second replica: %s = %v, want %v", series, v, want)
		}
	}
	inv.check(t)
}
