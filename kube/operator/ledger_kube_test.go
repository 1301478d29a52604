package operator

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeUnfinishedAssignmentIsCompleted leaves on the pool what a
// replica that died between writing its pending blocks and adding them
// would leave: the next writer must finish that assignment before cutting
// anything, so the block goes to the node it was promised to and to no
// other, even to a node that needs one right now.
func TestKubeUnfinishedAssignmentIsCompleted(t *testing.T) {
	cl := startCluster(t)
	inv := cl.watchInvariants()
	cl.createPool("v4", 28, "10.0.0.0/24")
	cl.createNode("a")
	o := opts{leaderElect: true, minFree: 16, delay: time.Minute}
	first := cl.startReplica("first", o)
	cl.eventually(30*time.Second, "node a has a block", cl.hasBlock("a"))
	first.stop(t)
	if got := blockNames(cl.nodeIPAM("a")); !slices.Equal(got, []string{"10.0.0.0/28"}) {
		t.Fatalf("node a has %v, want [10.0.0.0/28]", got)
	}

	// The dead replica's promise: 10.0.0.16/28, the next free block, to a.
	pend := pendingBlocks{ID: "dead", Holder: "dead-replica", Blocks: []pendingBlock{
		{CIDR: "10.0.0.16/28", NodeIPAM: "a", UID: cl.nodeIPAM("a").UID},
	}}
	raw, _ := json.Marshal(pend)
	p := cl.getPool("v4")
	p.Annotations = map[string]string{PendingBlocksAnnotation: string(raw)}
	if _, err := cl.c.lockstep.IPPools().Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.createNode("b") // wants a block: the next free one is the promised one

	cl.startReplica("second", o)
	cl.eventually(30*time.Second, "node b has a block", cl.hasBlock("b"))
	cl.eventually(10*time.Second, "the promised block reached node a and the pool is clear", func() (bool, string) {
		_, pending := cl.getPool("v4").Annotations[PendingBlocksAnnotation]
		got := blockNames(cl.nodeIPAM("a"))
		return !pending && slices.Contains(got, "10.0.0.16/28"), fmt.Sprintf("pending %v, node a %v", pending, got)
	})
	if got := blockNames(cl.nodeIPAM("b")); slices.Contains(got, "10.0.0.16/28") {
		t.Errorf("node b got the block promised to node a: %v", got)
	}
	inv.check(t)
}

// TestKubeUnfinishedAssignmentLeavesOutShrunkRange: a replica died after
// promising node a the block 10.0.0.128/28, and an administrator then
// shrank the pool to 10.0.0.0/25. The next writer completes the
// assignment without that block: no block is ever assigned outside its
// pool's CIDRs as read just before the write.
func TestKubeUnfinishedAssignmentLeavesOutShrunkRange(t *testing.T) {
	cl := startCluster(t)
	inv := cl.watchInvariants()
	cl.createPool("v4", 28, "10.0.0.0/24")
	cl.createNode("a")
	o := opts{leaderElect: true, minFree: 16, delay: time.Minute}
	first := cl.startReplica("first", o)
	cl.eventually(30*time.Second, "node a has a block", cl.hasBlock("a"))
	first.stop(t)

	const outside = "10.0.0.128/28"
	pend := pendingBlocks{ID: "dead", Holder: "dead-replica", Blocks: []pendingBlock{
		{CIDR: outside, NodeIPAM: "a", UID: cl.nodeIPAM("a").UID},
	}}
	raw, _ := json.Marshal(pend)
	p := cl.getPool("v4")
	p.Annotations = map[string]string{PendingBlocksAnnotation: string(raw)}
	p.Spec.CIDRs = []v1alpha1.CIDR{"10.0.0.0/25"}
	if _, err := cl.c.lockstep.IPPools().Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.createNode("b")

	second := cl.startReplica("second", o)
	cl.eventually(30*time.Second, "node b has a block and the pool is clear", func() (bool, string) {
		_, pending := cl.getPool("v4").Annotations[PendingBlocksAnnotation]
		return !pending && len(blockNames(cl.nodeIPAM("b"))) > 0, fmt.Sprintf("pending %v, node b %v", pending, blockNames(cl.nodeIPAM("b")))
	})
	for _, name := range []string{"a", "b"} {
		if got := blockNames(cl.nodeIPAM(name)); slices.Contains(got, outside) {
			t.Errorf("node %s got %s, outside the shrunk pool: %v", name, outside, got)
		}
	}
	if !strings.Contains(second.logs.String(), "no longer inside its pool") {
		t.Errorf("the replica did not say why it left %s out:\n%s", outside, second.logs.String())
	}
	inv.check(t)
}
