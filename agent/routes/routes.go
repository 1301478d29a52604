package routes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Protocol is the route protocol number (rtm_protocol) of every route
// lockstep programs: 108, ASCII 'l'. It is unassigned in iproute2's
// rt_protos and used by no other CNI we know of (Calico's routes carry 80,
// BIRD's 12).
const Protocol = 108

// Result is what one Apply changed, and what it could not.
type Result struct {
	Added, Replaced, Removed []Route
	// Conflicts are desired routes left out because a route lockstep does
	// not own already has their destination.
	Conflicts []Route
}

// Changed reports whether Apply changed the routing table.
func (r Result) Changed() bool {
	return len(r.Added)+len(r.Replaced)+len(r.Removed) > 0
}

// Peer is another node as routing needs it.
type Peer struct {
	// Node is the node's name.
	Node string
	// Addrs are its InternalIPs, in the order the Node lists them; the
	// first of a block's family is the next hop.
	Addrs []netip.Addr
	// Blocks are the pod address blocks assigned to it.
	Blocks []netip.Prefix
}

// Route is one route lockstep wants in the node's main table: Dst through
// the next hop Via, the address of Node.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string
}

// String formats r as ip-route would.
func (r Route) String() string { return fmt.Sprintf("%s via %s (node %s)", r.Dst, r.Via, r.Node) }

// Desired returns the routes to every block of peers, sorted by
// destination, and a sentence for each block it cannot route: a block
// whose node has no InternalIP of the block's family, or one that two
// nodes claim (the operator never assigns one block twice; while the
// objects disagree, neither node is trusted with it). Blocks are masked;
// peers are not modified.
func Desired(peers []Peer) ([]Route, []string) {
	var problems []string
	claims := map[netip.Prefix][]Route{}
	for _, p := range peers {
		for _, b := range p.Blocks {
			b = b.Masked()
			via, ok := nextHop(p.Addrs, b.Addr().Is6())
			if !ok {
				family := "IPv4"
				if b.Addr().Is6() {
					family = "IPv6"
				}
				problems = append(problems, fmt.Sprintf("node %s has no %s InternalIP to route its block %s through", p.Node, family, b))
				continue
			}
			claims[b] = append(claims[b], Route{Dst: b, Via: via, Node: p.Node})
		}
	}
	out := make([]Route, 0, len(claims))
	for dst, rs := range claims {
		nodes := map[string]bool{}
		for _, r := range rs {
			nodes[r.Node] = true
		}
		if len(nodes) > 1 {
			names := make([]string, 0, len(nodes))
			for n := range nodes {
				names = append(names, n)
			}
			slices.Sort(names)
			problems = append(problems, fmt.Sprintf("block %s is assigned to nodes %s; routing it to none of them", dst, strings.Join(names, ", ")))
			continue
		}
		out = append(out, rs[0])
	}
	slices.SortFunc(out, compareRoutes)
	slices.Sort(problems)
	return out, problems
}

// nextHop returns the first address of the wanted family.
func nextHop(addrs []netip.Addr, v6 bool) (netip.Addr, bool) {
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsValid() && a.Is6() == v6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func compareRoutes(a, b Route) int {
	if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
		return c
	}
	return a.Dst.Bits() - b.Dst.Bits()
}
