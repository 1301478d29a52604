package api

// Direction is the direction of traffic relative to a local endpoint (pod).
type Direction uint8

// Directions, numbered as the BPF programs number them.
const (
	// Ingress is traffic to the pod.
	Ingress Direction = 0
	// Egress is traffic from the pod.
	Egress Direction = 1
)

// String names the direction as policies and verdicts do: "ingress" or
// "egress".
func (d Direction) String() string {
	if d == Ingress {
		return "ingress"
	}
	return "egress"
}

// Peer identifies "who is on the other end" of a packet as the dataplane
// sees it. The values 0..255 are reserved; pod identities are 256..2^31-1;
// CIDR classes have the top bit set (see [CIDRClassBit]).
type Peer uint32

// Reserved peers.
const (
	// PeerAny matches every remote address: a rule with no from/to peers.
	PeerAny Peer = 0
	// PeerWorld is the identity of every address that is not a known pod's.
	PeerWorld Peer = 2
	// FirstPodIdentity is the smallest identity given to a pod label set.
	FirstPodIdentity Peer = 256
	// CIDRClassBit marks a Peer as a CIDR class: a set of ipBlock peers that
	// an address range matches. Class CIDRClassBit|0 means "no ipBlock".
	CIDRClassBit Peer = 1 << 31
)

// NoCIDRClass is the class of addresses that match no ipBlock at all.
const NoCIDRClass = CIDRClassBit

// Protocol numbers as used in rule keys. ProtoOther (0) is the key for
// every protocol that has no ports (ICMP, ICMPv6, ...): a rule without
// ports allows them, a rule with ports never does.
const (
	ProtoOther uint8 = 0
	ProtoTCP   uint8 = 6
	ProtoUDP   uint8 = 17
	ProtoSCTP  uint8 = 132
)
