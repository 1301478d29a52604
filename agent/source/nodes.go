package source

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/routes"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Nodes is the source's view of the cluster's nodes, handed to
// Options.OnNodes whenever a Node or NodeIPAM changes.
type Nodes struct {
	// Self is this agent's Node, nil until the API server has it.
	Self *corev1.Node
	// SelfIPAM is this node's NodeIPAM, nil while there is none that Self
	// controls: a NodeIPAM left by a deleted Node of the same name is
	// ignored (see v1alpha1.NodeIPAM.ControlledBy).
	SelfIPAM *v1alpha1.NodeIPAM
	// Peers are the other nodes with their InternalIPs and assigned
	// blocks, sorted by name: what routes.Desired turns into routes.
	Peers []routes.Peer
	// Problems are objects that could not be used, one sentence each.
	Problems []string
}

// NodesView computes Nodes for the agent of node self from every Node and
// NodeIPAM the API server has. A NodeIPAM counts only while the Node of
// its name exists and controls it; blocks and addresses that do not parse
// are left out and reported in Problems. The inputs are not modified.
func NodesView(self string, nodes []*corev1.Node, ipams []*v1alpha1.NodeIPAM) Nodes {
	var out Nodes
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out.Self = byName[self]
	for _, ipam := range ipams {
		node := byName[ipam.Name]
		if node == nil || !ipam.ControlledBy(node.UID) {
			// No Node yet, or a stale object of a deleted Node.
			continue
		}
		if ipam.Name == self {
			out.SelfIPAM = ipam
			continue
		}
		peer := routes.Peer{Node: node.Name}
		for _, a := range node.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			addr, err := netip.ParseAddr(a.Address)
			if err != nil {
				out.Problems = append(out.Problems, fmt.Sprintf("node %s: InternalIP %q is not an address", node.Name, a.Address))
				continue
			}
			peer.Addrs = append(peer.Addrs, addr.Unmap())
		}
		blocks, problems := Blocks(ipam)
		peer.Blocks = blocks
		out.Problems = append(out.Problems, problems...)
		out.Peers = append(out.Peers, peer)
	}
	slices.SortFunc(out.Peers, func(a, b routes.Peer) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Blocks returns the parsed spec.blocks of ipam, for an agent that takes
// its pools from them. Blocks that do not parse are skipped and reported.
func Blocks(ipam *v1alpha1.NodeIPAM) ([]netip.Prefix, []string) {
	if ipam == nil {
		return nil, nil
	}
	var out []netip.Prefix
	var problems []string
	for _, b := range ipam.Spec.Blocks {
		p, err := b.CIDR.Prefix()
		if err != nil {
			problems = append(problems, fmt.Sprintf("nodeipam %s: block: %v", ipam.Name, err))
			continue
		}
		out = append(out, p)
	}
	return out, problems
}
