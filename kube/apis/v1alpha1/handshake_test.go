package v1alpha1_test

import (
	"testing"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

const block v1alpha1.CIDR = "10.244.0.64/26"

// node returns node-a's NodeIPAM at generation gen, holding block, as the
// agent last described it at observed.
func node(gen, observed int64) *v1alpha1.NodeIPAM {
	n := v1alpha1.NewNodeIPAM("node-a", "uid-a")
	n.Generation = gen
	n.Spec.Blocks = []v1alpha1.Block{{CIDR: "10.244.0.0/26", Pool: "default"}, {CIDR: block, Pool: "default"}}
	n.Status.ObservedGeneration = observed
	return n
}

func mark(n *v1alpha1.NodeIPAM, s v1alpha1.ReleaseState) *v1alpha1.NodeIPAM {
	n.Spec.Releases = []v1alpha1.ReleaseMark{{CIDR: block, State: s, Since: metav1.Now()}}
	return n
}

func answer(n *v1alpha1.NodeIPAM, s v1alpha1.ReleaseState) *v1alpha1.NodeIPAM {
	n.Status.Releases = []v1alpha1.ReleaseAnswer{{CIDR: block, State: s, Since: metav1.Now()}}
	return n
}

// TestExcessReleaseRace walks the seed 004 race through MayRelease: the
// operator may take a block back only on an agent answer given to the spec
// it is looking at.
func TestExcessReleaseRace(t *testing.T) {
	tests := []struct {
		name string
		n    *v1alpha1.NodeIPAM
		want bool
	}{{
		// The race itself: the usage report says the block is empty,
		// but the agent has allocated from it since. Without a mark
		// and an answer there is no release.
		name: "empty by usage report alone",
		n: func() *v1alpha1.NodeIPAM {
			n := node(3, 3)
			n.Status.Blocks = []v1alpha1.BlockUsage{{CIDR: block, Allocated: 0}}
			return n
		}(),
		want: false,
	}, {
		name: "marked, agent has not answered yet",
		n:    mark(node(4, 3), v1alpha1.MarkedForRelease),
		want: false,
	}, {
		// A ready answer left over from an earlier mark (generation 2)
		// must not approve the new one (generation 4): the agent may
		// have lifted the quarantine when the old mark was withdrawn.
		name: "marked, stale ready answer from an earlier mark",
		n:    answer(mark(node(4, 2), v1alpha1.MarkedForRelease), v1alpha1.ReadyForRelease),
		want: false,
	}, {
		name: "marked, agent refuses",
		n:    answer(mark(node(4, 4), v1alpha1.MarkedForRelease), v1alpha1.DoNotRelease),
		want: false,
	}, {
		name: "marked, agent ready for this spec",
		n:    answer(mark(node(4, 4), v1alpha1.MarkedForRelease), v1alpha1.ReadyForRelease),
		want: true,
	}, {
		name: "mark withdrawn, ready answer not yet cleared",
		n:    answer(node(5, 4), v1alpha1.ReadyForRelease),
		want: false,
	}, {
		name: "already released",
		n: func() *v1alpha1.NodeIPAM {
			n := answer(mark(node(5, 5), v1alpha1.Released), v1alpha1.ReadyForRelease)
			n.Spec.Blocks = n.Spec.Blocks[:1]
			return n
		}(),
		want: false,
	}, {
		name: "never written by the API server (generation 0)",
		n:    answer(mark(node(0, 0), v1alpha1.MarkedForRelease), v1alpha1.ReadyForRelease),
		want: false,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.n.MayRelease(block); got != tt.want {
				t.Errorf("MayRelease(%s) = %v, want %v", block, got, tt.want)
			}
		})
	}
}

// TestDraining: a block drains only under a marked-for-release mark with
// drain set; an excess mark, a released drain mark or no mark at all is
// not a drain.
func TestDraining(t *testing.T) {
	drain := func(n *v1alpha1.NodeIPAM) *v1alpha1.NodeIPAM {
		n.Spec.Releases[0].Drain = true
		return n
	}
	tests := []struct {
		name string
		n    *v1alpha1.NodeIPAM
		want bool
	}{
		{"no mark", node(3, 3), false},
		{"excess mark", mark(node(3, 3), v1alpha1.MarkedForRelease), false},
		{"drain mark", drain(mark(node(3, 3), v1alpha1.MarkedForRelease)), true},
		{"released drain mark", drain(mark(node(3, 3), v1alpha1.Released)), false},
	}
	for _, tt := range tests {
		if got := tt.n.Spec.Draining(block); got != tt.want {
			t.Errorf("%s: Draining(%s) = %v, want %v", tt.name, block, got, tt.want)
		}
	}
	// A drain mark is released on the same answer as any mark.
	n := answer(drain(mark(node(4, 4), v1alpha1.MarkedForRelease)), v1alpha1.ReadyForRelease)
	if !n.MayRelease(block) {
		t.Error("a drained block answered ready-for-release may not be released")
	}
	if n := answer(drain(mark(node(4, 4), v1alpha1.MarkedForRelease)), v1alpha1.DoNotRelease); n.MayRelease(block) {
		t.Error("a drained block answered do-not-release may be released")
	}
}

// TestStaleNodeIPAMAfterNodeReplaced is the seed 003 race: a Node deleted
// and re-created under the same name finds its predecessor's NodeIPAM
// still there. Only the UID tells them apart.
func TestStaleNodeIPAMAfterNodeReplaced(t *testing.T) {
	stale := v1alpha1.NewNodeIPAM("node-a", "uid-old")
	if stale.ControlledBy("uid-new") {
		t.Error("the new node's agent accepted its predecessor's NodeIPAM")
	}
	if !stale.ControlledBy("uid-old") {
		t.Error("a NodeIPAM is not controlled by the node it was made for")
	}
	if stale.ControlledBy("") {
		t.Error("an empty UID matched; an agent that failed to read its Node would accept any object")
	}

	orphan := stale.DeepCopy()
	orphan.OwnerReferences = nil
	if orphan.ControlledBy("uid-old") {
		t.Error("a NodeIPAM without owner reference was accepted")
	}
	other := stale.DeepCopy()
	other.OwnerReferences[0].Name = "node-b"
	if other.ControlledBy("uid-old") {
		t.Error("a NodeIPAM owned by a Node of another name was accepted")
	}
	notController := stale.DeepCopy()
	notController.OwnerReferences[0].Controller = nil
	if notController.ControlledBy("uid-old") {
		t.Error("an owner reference without controller=true was accepted")
	}
}

func TestDeepCopyIsDeep(t *testing.T) {
	n := answer(mark(node(4, 4), v1alpha1.MarkedForRelease), v1alpha1.ReadyForRelease)
	c := n.DeepCopy()
	c.Spec.Blocks[0].CIDR = "10.0.0.0/26"
	c.Spec.Releases[0].State = v1alpha1.Released
	c.Status.Releases[0].State = v1alpha1.DoNotRelease
	*c.OwnerReferences[0].Controller = false
	if n.Spec.Blocks[0].CIDR != "10.244.0.0/26" || n.Spec.Releases[0].State != v1alpha1.MarkedForRelease ||
		n.Status.Releases[0].State != v1alpha1.ReadyForRelease || !*n.OwnerReferences[0].Controller {
		t.Error("changing a DeepCopy changed the original")
	}
}

func TestCIDRPrefix(t *testing.T) {
	tests := []struct {
		cidr v1alpha1.CIDR
		ok   bool
	}{
		{"10.244.0.0/16", true},
		{"fd00:10:244::/56", true},
		{"::/0", true},
		{"10.244.0.1/16", false}, // host bits set
		{"FD00::/8", false},      // not as netip prints it
		{"::ffff:10.0.0.0/104", false},
		{"10.244.0.0", false},
		{"", false},
	}
	for _, tt := range tests {
		p, err := tt.cidr.Prefix()
		if (err == nil) != tt.ok {
			t.Errorf("CIDR(%q).Prefix() = %v, %v; want ok=%v", tt.cidr, p, err, tt.ok)
		}
		if err == nil && v1alpha1.CIDRFromPrefix(p) != tt.cidr {
			t.Errorf("CIDRFromPrefix(%v) = %q, want %q", p, v1alpha1.CIDRFromPrefix(p), tt.cidr)
		}
	}
}
