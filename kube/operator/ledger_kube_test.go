package operator

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
