package policy

import (
	"net/netip"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// PortRange is an inclusive range of destination ports. {0, 65535} means
// every port. For ProtoOther the range is ignored.
type PortRange struct {
	Lo, Hi uint16
}

// RuleKey is one allow-list entry of an endpoint: traffic in Dir with the
// remote Peer (a pod identity, PeerAny, PeerWorld or a CIDR class) using
// Proto is allowed on the ports of the entry's []PortRange.
type RuleKey struct {
	Peer  policyapi.Peer
	Dir   policyapi.Direction
	Proto uint8
}

// MaxPortRanges is how many disjoint port ranges one RuleKey may carry.
// A BPF map value holds 16 inline; the eBPF dataplane splits a rule of
// more by port into buckets, an entry each, so that a packet costs at
// most two lookups, and the iptables one into multiport matches. The
// bound keeps what one rule costs either of them in check. The compiler
// merges overlapping and adjacent ranges first; a direction of an
// endpoint where more remain fails closed (see [EndpointPolicy.Failed]).
const MaxPortRanges = 4096

// EndpointPolicy is the complete policy of one local endpoint.
type EndpointPolicy struct {
	// IPv4 and IPv6 are the pod's own addresses (the zero Addr when the pod
	// has none of that family): packets from the pod with any other source
	// are dropped (anti-spoofing).
	IPv4, IPv6 netip.Addr
	// IngressIsolated / EgressIsolated: some policy of that direction
	// selects the pod. A direction that is not isolated allows everything.
	IngressIsolated, EgressIsolated bool
	// Rules is the allow-list for the isolated directions. Ranges are sorted,
	// disjoint and non-adjacent; at most MaxPortRanges per key.
	Rules map[RuleKey][]PortRange
	// Failed says, by Direction, why the endpoint has no allow at all in
	// that direction: a policy selecting it for the direction could not be
	// compiled or was over its namespace's budget, or the direction's
	// rules do not fit the dataplane. Such a direction is isolated and
	// Rules has no key of it: what lockstep cannot enforce fails closed,
	// for the endpoints the offending policies select and no other. ""
	// when the direction compiled.
	Failed [2]string
	// FailedPolicies names (namespace/name, sorted) the policies of
	// Desired.FailedPolicies that select the endpoint in a direction they
	// declare: those this node fails closed on, and so the ones whose
	// owners it tells (a node must not report every failed policy of the
	// cluster). Nil when none. It is for reporting: dataplanes ignore it.
	FailedPolicies []string
	// Isolators names (namespace/name, sorted), by Direction, the policies
	// that select the endpoint for that direction and so isolate it: the
	// policies whose default deny a packet of the direction that no rule
	// allows meets. Nil for a direction that is not isolated. It is for
	// reporting (per-policy verdict counts): dataplanes enforce by
	// IngressIsolated and EgressIsolated.
	Isolators [2][]string
	// Origins names, for every key of Rules, the policy rule that allowed
	// it (see [RuleOrigin]), so that a dataplane can report which rule
	// decided a packet. Never nil; like Rules, a new map when it changed.
	// The origins are shared, read-only: every key a rule allowed, of
	// every endpoint, points at one RuleOrigin while the rule is
	// unchanged, so that a copy of the map costs a pointer a key.
	Origins map[RuleKey]*RuleOrigin
}

// AddrEntry is what the dataplane knows about one pod address.
type AddrEntry struct {
	// Identity is the pod's identity (>= FirstPodIdentity).
	Identity policyapi.Peer
	// CIDRClass is the class of ipBlock peers this address matches
	// (NoCIDRClass when none). Pod addresses carry it here so that ipBlock
	// rules apply to pods without a longest-prefix lookup.
	CIDRClass policyapi.Peer
}

// Desired is the complete dataplane state of a node: what the dataplane
// must enforce once it has applied it. Maps are keyed by value so two
// Desired can be compared entry by entry.
//
// # Sharing
//
// A Desired, and every map, slice and *EndpointPolicy it reaches, is
// immutable once returned: neither the compiler nor a dataplane ever
// modifies it, and a dataplane may keep references to it after Apply
// returns. A caller that needs a variant copies what it changes (the
// enforcer copies Endpoints to leave out an endpoint it could not attach).
//
// Successive results of one [Incremental] share whatever did not change:
//
//   - Addrs, CIDRs and Endpoints are the previous result's very maps when
//     none of their entries changed, and new maps otherwise;
//   - an endpoint whose policy did not change keeps its *EndpointPolicy
//     pointer (and so its Rules map); one whose policy changed gets a new
//     one, never an old one modified;
//   - the []PortRange of one EndpointPolicy's Rules may share a backing
//     array, each slice capped at its own length;
//   - a key whose ranges are the very slice (the same first element and
//     length) the key had in an earlier result also has the same origin
//     as then: a key whose origin changed gets new ranges even when they
//     are equal.
//
// So a dataplane may skip, by pointer comparison alone, every part that is
// the same object as in the state it applied last: the same pointer means
// the same content, and a key's unchanged ranges slice an unchanged
// origin. The converse does not hold: a new pointer may carry
// equal content (after a compiler rebuild, or a change that cancelled
// out), so a dataplane that compares contents too saves more work. [Compile]
// returns new maps and pointers every time.
type Desired struct {
	// Addrs maps every known pod address (local and remote) to its identity
	// and CIDR class. Addresses are unmapped (IPv4 as 4 bytes).
	Addrs map[netip.Addr]AddrEntry
	// CIDRs maps address ranges to CIDR classes for addresses that are not
	// pods. It always contains 0.0.0.0/0 and ::/0 (NoCIDRClass unless an
	// ipBlock covers everything). The dataplane looks up the longest prefix.
	CIDRs map[netip.Prefix]policyapi.Peer
	// Endpoints maps the host-side interface name of every local endpoint
	// the dataplane enforces to its policy.
	Endpoints map[string]*EndpointPolicy
	// Services maps every Service frontend the dataplane translates for
	// pods to its backends. It changes with the policy in one Apply, so a
	// packet never meets new backends with the old policy or the reverse.
	// Like Endpoints, an entry whose content did not change keeps its
	// pointer in successive results of one [Incremental]. Nil means no
	// Service.
	Services map[ServiceFrontend]*ServiceEntry
	// ServicesBase and ServicesChanged describe Services as a change:
	// when ServicesBase is not nil, Services is ServicesBase with the
	// frontends of ServicesChanged added, replaced or removed, and every
	// other frontend's entry the very pointer ServicesBase holds. A
	// dataplane that applied ServicesBase may then look at those
	// frontends only. [Incremental] fills them in when Services is a new
	// map made from the previous result's; otherwise they are nil.
	ServicesBase    map[ServiceFrontend]*ServiceEntry
	ServicesChanged []ServiceFrontend
	// FailedPolicies maps each policy (namespace/name) that could not be
	// compiled, or whose namespace is over its budget (see [Limits]), to
	// the reason; the endpoints it selects fail closed. It is for
	// reporting: dataplanes ignore it. Like Endpoints, it is the previous
	// result's very map when it did not change.
	FailedPolicies map[string]string
	// ServicesOverCapacity maps each namespace whose Services the limits
	// leave untranslated (see [Limits].ServiceFrontends) to the reason:
	// no frontend they own is in Services (kube-proxy, where it runs,
	// translates them). It is for reporting, and is the previous result's
	// very map when it did not change.
	ServicesOverCapacity map[string]string
}
