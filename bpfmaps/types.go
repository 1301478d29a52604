package bpfmaps

import (
	"fmt"
	"net/netip"
)

// Names of the pinned maps, as pinned under the dataplane's pin root.
const (
	StateMap     = "lockstep_state"
	MonitorMap   = "lockstep_monitor"
	EndpointsMap = "lockstep_endpoints"
	PolicyMap    = "lockstep_policy"
	IPCacheMap   = "lockstep_ipcache"
	CIDRsMap     = "lockstep_cidrs"
	CTMap        = "lockstep_ct"
	CTCacheMap   = "lockstep_ct_cache"
	CTEpochMap   = "lockstep_ct_epoch"
	CountersMap  = "lockstep_drops"
	EventsMap    = "lockstep_events"
	ServicesMap  = "lockstep_services"
	BackendsMap  = "lockstep_backends"
	SvcCTMap     = "lockstep_svc_ct"
	AffinityMap  = "lockstep_affinity"
	// CTShareMap and CTReleasedMap hold each endpoint's conntrack share
	// (see CTShare).
	CTShareMap    = "lockstep_ct_share"
	CTReleasedMap = "lockstep_ct_released"
	// CTInsertedMap and CTEvictionsMap count what the conntrack tables'
	// LRUs evict (see CTEvictions).
	CTInsertedMap  = "lockstep_ct_inserted"
	CTEvictionsMap = "lockstep_ct_evictions"
	// UplinksMap holds the ifindexes of the node's devices from_uplink is
	// attached to: from_pod routes packets itself only out of those.
	UplinksMap = "lockstep_uplinks"
	// RoutedSYNMap is the per-CPU slot from_uplink hands to_pod the SYN
	// it routed in (a CTKey; ifindex 0: empty).
	RoutedSYNMap = "lockstep_routed_syn"
)

// Names of the per-policy verdict counters, which are not pinned (the
// rule ids they count by start with the agent, and so do their counts):
// RuleAllowedMap counts, per CPU and by rule id (PolicyValue.Rule), the
// new connections each rule allowed; DeniedMap, per CPU and by DeniedKey,
// the packets each endpoint's isolated directions dropped by default deny.
const (
	RuleAllowedMap = "lockstep_rule_allowed"
	DeniedMap      = "lockstep_denied"
)

// MaxRuleIDs bounds the rule ids (C: RULE_IDS): ids run from 1 to
// MaxRuleIDs-1, each RuleAllowedMap's index.
const MaxRuleIDs = 16384

// DeniedKey is the DeniedMap key of the endpoint of ifindex in dir (0
// ingress, 1 egress), as lockstep_ct_share's (C: ifindex << 1 | dir).
func DeniedKey(ifindex uint32, dir uint8) uint32 { return ifindex<<1 | uint32(dir) }

// Names lists every pinned map, in the order `lockstep maps list` prints
// them.
var Names = []string{StateMap, MonitorMap, EndpointsMap, PolicyMap, IPCacheMap, CIDRsMap, ServicesMap, BackendsMap, CTMap, SvcCTMap, AffinityMap, CTCacheMap, CTEpochMap, CTShareMap, CTReleasedMap, CTInsertedMap, CTEvictionsMap, CountersMap, EventsMap, UplinksMap, RoutedSYNMap}

// Capacities of the Service maps (C: SVC_MAX_FRONTENDS, SVC_MAX_BACKENDS):
// frontends and backends per parity. ServicesMap and BackendsMap hold both
// parities, twice as many entries.
const (
	MaxFrontends = 32768
	MaxBackends  = 131072
)

// Capacities of the conntrack tables (CTMap, SvcCTMap) and the share of
// one endpoint (C: CT_SHARE): the entries it may hold in both together
// before its new connections are refused, while the node is under
// pressure: while its estimate of the entries held in both tables, at
// CTNodeKey, is above CTPressure (C: CT_PRESSURE, half of one table).
// CTShareSlots is the size of CTShareMap and CTReleasedMap (C:
// CT_SHARE_SLOTS).
const (
	CTCapacity    = 131072
	SvcCTCapacity = 131072
	CTShareLimit  = 16384
	CTPressure    = 65536
	CTShareSlots  = 16384
)

// SvcAbsent in SvcValue.Count says that the parity has no such frontend
// (C: SVC_ABSENT); SvcNoLocal that the frontend has no backend for this
// node's pods while other nodes have some (internalTrafficPolicy Local):
// its new connections are dropped (C: SVC_NO_LOCAL).
const (
	SvcAbsent  uint16 = 0xffff
	SvcNoLocal uint16 = 0xfffe
)

// Endpoint flag bits of EndpointInfo.Flags (C: EP_*).
const (
	IngressIsolated uint8 = 1 << 0
	EgressIsolated  uint8 = 1 << 1
	// IngressNoAny and EgressNoAny say that no rule of the direction
	// allows every peer (policyapi.PeerAny), so the dataplane skips that
	// lookup. A clear bit is always safe: it only costs the lookup.
	IngressNoAny uint8 = 1 << 2
	EgressNoAny  uint8 = 1 << 3
	// RoutedSYN says that the endpoint's to_pod takes the SYNs from_uplink
	// routes (bpf/lib/route.h): written by every agent that knows host
	// routing, clear in what older agents wrote.
	RoutedSYN uint8 = 1 << 4
)

// MaxPortRanges is the number of port ranges a PolicyValue holds (C:
// MAX_PORT_RANGES). A rule of more is bucketed (see PolicyKey).
const MaxPortRanges = 16

// RuleBucketed is set in the NRanges of a bucketed rule's chunk 0 (C:
// RULE_BUCKETED), with the bucket shift in bits 16-19 (see PolicyKey); the
// low 16 bits of NRanges count an entry's ranges.
const RuleBucketed = 1 << 31

// MinBucketShift is the smallest bucket shift: a bucket of 16 ports holds
// at most 8 disjoint, non-adjacent ranges, so every rule fits with it.
const MinBucketShift = 4

// Addr is a 16-byte address as the maps store it: IPv6, or IPv4 as
// IPv4-mapped IPv6 (::ffff:a.b.c.d). C: struct v6addr.
type Addr [16]byte

// AddrFrom returns a as the maps store it.
func AddrFrom(a netip.Addr) Addr { return Addr(a.As16()) }

// Netip returns the address, IPv4 unmapped.
func (a Addr) Netip() netip.Addr { return netip.AddrFrom16(a).Unmap() }

// String formats the address like netip.Addr (IPv4 unmapped).
func (a Addr) String() string { return a.Netip().String() }

// MarshalText makes Addr a JSON string.
func (a Addr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// State mirrors struct state: the single entry of lockstep_state.
type State struct {
	// Gen counts applied states; Gen&1 is the parity packets use.
	Gen uint32 `json:"gen"`
	// Reserved is zero. (The monitor flag lives in MonitorMap, so that
	// the agent's flips and `lockstep monitor` never write one value.)
	Reserved uint32 `json:"reserved"`
}

// EndpointInfo mirrors struct endpoint_info: the value of lockstep_endpoints,
// keyed by the host veth's ifindex (uint32).
type EndpointInfo struct {
	// Flags holds IngressIsolated, EgressIsolated, IngressNoAny and
	// EgressNoAny per parity.
	Flags [2]uint8 `json:"flags"`
	HasV4 uint8    `json:"has_v4"`
	HasV6 uint8    `json:"has_v6"`
	IPv4  Addr     `json:"ipv4"`
	IPv6  Addr     `json:"ipv6"`
}

// PolicyOuterKey mirrors struct policy_outer_key: the key of lockstep_policy,
// whose values are inner maps of PolicyKey → PolicyValue.
type PolicyOuterKey struct {
	Ifindex uint32 `json:"ifindex"`
	Parity  uint32 `json:"parity"`
}

// PolicyKey mirrors struct policy_key: one allow-list entry of an
// endpoint's inner policy map. A rule of at most MaxPortRanges ranges is
// chunk 0. A rule of more is bucketed: chunk 0 says RuleBucketed and a
// shift s, and chunk 1+b holds the ranges within ports [b<<s, (b+1)<<s),
// clipped, for each bucket b that has any.
type PolicyKey struct {
	Peer  uint32 `json:"peer"`
	Dir   uint8  `json:"dir"`
	Proto uint8  `json:"proto"`
	Chunk uint16 `json:"chunk,omitempty"`
}

// PortRange mirrors struct port_range: an inclusive range of ports.
type PortRange struct {
	Lo uint16 `json:"lo"`
	Hi uint16 `json:"hi"`
}

// PolicyValue mirrors struct policy_value: the port ranges of a PolicyKey
// (NRanges&0xffff of them) and RuleMore.
type PolicyValue struct {
	NRanges uint32 `json:"nranges"`
	// Rule is the id the agent gave the policy rule that allowed the key
	// (chunk 0 only; 0: unknown). The programs copy it into the
	// Event of a connection they allow and never decide by it.
	Rule   uint32                   `json:"rule,omitempty"`
	Ranges [MaxPortRanges]PortRange `json:"-"`
}

// IPCacheValue mirrors struct ipcache_value: the value of lockstep_ipcache,
// keyed by a pod Addr, per parity.
type IPCacheValue struct {
	Identity  [2]uint32 `json:"identity"`
	CIDRClass [2]uint32 `json:"cidr_class"`
}

// CIDRKey mirrors struct cidr_key: the key of the lockstep_cidrs LPM trie.
// PrefixLen counts bits of the 16-byte Addr (an IPv4 /n is 96+n).
type CIDRKey struct {
	PrefixLen uint32 `json:"prefixlen"`
	Addr      Addr   `json:"addr"`
}

// Prefix returns the prefix k stands for, IPv4 as an IPv4 prefix.
func (k CIDRKey) Prefix() netip.Prefix {
	a := netip.AddrFrom16(k.Addr)
	if a.Is4In6() && k.PrefixLen >= 96 {
		return netip.PrefixFrom(a.Unmap(), int(k.PrefixLen)-96)
	}
	return netip.PrefixFrom(a, int(k.PrefixLen))
}

// MarshalText makes CIDRKey a JSON string such as "10.0.0.0/8".
func (k CIDRKey) MarshalText() ([]byte, error) { return []byte(k.Prefix().String()), nil }

// CIDRValue mirrors struct cidr_value: the CIDR class of a prefix, per
// parity.
type CIDRValue struct {
	CIDRClass [2]uint32 `json:"cidr_class"`
}

// CTKey mirrors struct ct_key: the two ends of a connection seen at an
// endpoint, in the dataplane's canonical order (Port[i] belongs to
// Addr[i]). Ports are in host byte order.
type CTKey struct {
	Ifindex uint32    `json:"ifindex"`
	Proto   uint8     `json:"proto"`
	Pad     uint8     `json:"-"`
	Port    [2]uint16 `json:"port"`
	Pad2    uint16    `json:"-"`
	Addr    [2]Addr   `json:"addr"`
}

// CTEntry mirrors struct ct_entry.
type CTEntry struct {
	// Expires is a CLOCK_MONOTONIC deadline in nanoseconds (read at tick
	// resolution).
	Expires uint64 `json:"expires"`
	// Flags has bit CTAllowed(dir, o) set once a packet in dir sent by
	// end o of the key was allowed as a new connection.
	Flags uint32 `json:"flags"`
	Pad   uint32 `json:"-"`
}

// CTCacheSlot mirrors struct ct_cache_slot: one slot of a CPU's flow
// cache (CTCacheMap, a per-CPU array), a copy of the conntrack entry of Key
// that the dataplane uses while ValidUntil has not passed and CTEpochMap
// still holds Epoch. A zero slot is empty. NatPort and NatAddr copy those
// of a SvcCTEntry (zero for a CTEntry), as does PeerPort.
type CTCacheSlot struct {
	Key   CTKey  `json:"key"`
	Epoch uint32 `json:"epoch"`
	// ValidUntil is a CLOCK_MONOTONIC deadline in nanoseconds, like
	// CTEntry.Expires.
	ValidUntil uint64 `json:"valid_until"`
	Flags      uint32 `json:"flags"`
	NatPort    uint16 `json:"nat_port"`
	PeerPort   uint16 `json:"peer_port,omitempty"`
	NatAddr    Addr   `json:"nat_addr"`
}

// Flags of SvcCTEntry (C: CT_SVC_*), beside the CTAllowed bits.
const (
	// CTSvcFwd: packets of the orientation the entry's bit allowed (the
	// client's, to the frontend) get NatAddr:NatPort (the backend) as
	// their destination.
	CTSvcFwd uint32 = 1 << 8
	// CTSvcRev: replies to that orientation (the backend's) get
	// NatAddr:NatPort (the frontend) as their source.
	CTSvcRev uint32 = 1 << 9
	// CTSvcHairpin: client and backend are one pod; the other address is
	// translated too (to the frontend's) and the packet goes straight
	// back to the pod.
	CTSvcHairpin uint32 = 1 << 10
	// CTFin and CTRst, in CTEntry.Flags and SvcCTEntry.Flags, say that a
	// FIN or a RST of the TCP connection was seen: the entry is closing,
	// and a pure SYN over it starts a new connection (C: CT_FIN, CT_RST).
	CTFin uint32 = 1 << 11
	CTRst uint32 = 1 << 12
	// CTRouted, in CTEntry.Flags and SvcCTEntry.Flags: a TCP connection
	// between the pod and another node's pod, whose packets the programs
	// route past the node's stack when they can (C: CT_ROUTED,
	// bpf/lib/route.h).
	CTRouted uint32 = 1 << 13
	// CTSvcMark, in SvcCTEntry.Flags of a CTSvcFwd entry: the frontend
	// carries a mark (SvcValue.Mark, kube-proxy's masquerade mark) and the
	// backend is not BackendLocal, so every packet the client sends gets
	// the mark (C: CT_SVC_MARK).
	CTSvcMark uint32 = 1 << 14
)

// CTShareKey is the key of CTShareMap and CTReleasedMap for the
// connections of the endpoint of ifindex opened in dir (0 ingress, 1
// egress; C: ct_share_key).
func CTShareKey(ifindex uint32, dir uint8) uint32 { return ifindex<<1 | uint32(dir) }

// CTReclaimKey is the key of CTReleasedMap that holds the time of the
// agent's last reclaim (C: CT_RECLAIM_KEY): that of ifindex 0, which no
// endpoint has.
const CTReclaimKey uint32 = 0

// CTNodeKey is the key of CTShareMap and CTReleasedMap that counts the
// entries of the whole node, in both conntrack tables, like an
// endpoint's (C: CT_NODE_KEY): that of ifindex 0 and egress, which no
// endpoint has. Created less released is the programs' estimate of the
// entries the node holds; the shares are enforced while it is above
// CTPressure.
const CTNodeKey uint32 = 1

// CTEntryDir is the direction (0 ingress, 1 egress) a CTMap entry's
// connection was opened in: the direction of its one allowed bit.
func CTEntryDir(flags uint32) uint8 {
	if flags&0b1100 != 0 {
		return 1
	}
	return 0
}

// CTShare mirrors struct ct_share: the value of CTShareMap, keyed by
// CTShareKey (a host veth's ifindex and the direction its connections were
// opened in). The programs count the conntrack entries the endpoint
// created and the new connections refused beyond its share; the agent
// writes, in CTReleasedMap (a uint64 per key), how many of those created
// are gone, and at CTReclaimKey the CLOCK_MONOTONIC_COARSE time of its
// last reclaim: the programs refuse nothing while that is older than 30 s.
// Created less released is the programs' estimate of the entries the
// endpoint holds in that direction. At CTNodeKey they count the whole
// node's entries, and the refusals stay zero.
type CTShare struct {
	Created uint64 `json:"created"`
	Refused uint64 `json:"refused"`
}

// Keys of CTInsertedMap and CTEvictionsMap: the conntrack table counted
// (C: CT_TABLE_CT, CT_TABLE_SVC). CTTables is the number of keys.
const (
	CTTableCT  uint32 = 0
	CTTableSvc uint32 = 1
	CTTables          = 2
)

// CTTableMaps names the conntrack table of each key of CTInsertedMap and
// CTEvictionsMap.
var CTTableMaps = [CTTables]string{CTTableCT: CTMap, CTTableSvc: SvcCTMap}

// CTEvictions mirrors struct ct_evictions: the value of CTEvictionsMap,
// keyed by a CTTable* key, which only the agent writes. The programs count
// in CTInsertedMap (a uint64 per CPU) the entries they add to the table
// under a new key; the agent counts here the entries it deletes, and
// derives how many the table's LRU evicted to make room: inserted +
// untracked - deleted - the entries left. Untracked counts the entries
// the agent found that no insert had counted (made before the count
// existed), Evicted the last count derived, which never goes down.
type CTEvictions struct {
	Deleted   uint64 `json:"deleted"`
	Untracked uint64 `json:"untracked"`
	Evicted   uint64 `json:"evicted"`
}

// SvcCTEntry mirrors struct svc_ct_entry: the value of SvcCTMap, keyed by
// a CTKey, for a connection the dataplane translates for a Service.
type SvcCTEntry struct {
	// Expires and Flags are as in CTEntry; Flags also holds CTSvc*.
	Expires uint64 `json:"expires"`
	Flags   uint32 `json:"flags"`
	NatPort uint16 `json:"nat_port"`
	// PeerPort is zero, or the client's port on the other side of the
	// translation when the dataplane gave the connection another source
	// port (its translated tuple was another connection's): in a CTSvcFwd
	// entry the port its packets leave with, in a CTSvcRev entry the
	// client's own. Host byte order.
	PeerPort uint16 `json:"peer_port,omitempty"`
	NatAddr  Addr   `json:"nat_addr"`
}

// SvcKey mirrors struct svc_key: a Service frontend, the key of
// ServicesMap. Port is in host byte order.
type SvcKey struct {
	Addr  Addr   `json:"addr"`
	Port  uint16 `json:"port"`
	Proto uint8  `json:"proto"`
	Pad   uint8  `json:"-"`
}

// String formats k as PROTO ADDR:PORT, e.g. "tcp 10.96.0.10:80".
func (k SvcKey) String() string {
	return fmt.Sprintf("%s %s", ProtoString(k.Proto), netip.AddrPortFrom(k.Addr.Netip(), k.Port))
}

// MarshalText makes SvcKey a JSON string (String).
func (k SvcKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// SvcValue mirrors struct svc_value: a frontend's ID (which names its
// backends and affinity entries) and, per parity, its backend count (or
// SvcAbsent, SvcNoLocal), sessionAffinity ClientIP timeout in seconds
// (0: none) and the mark ORed into every packet a client sends on a
// connection translated to a backend that is not BackendLocal (0: none;
// kube-proxy's masquerade mark for an external frontend).
type SvcValue struct {
	ID       uint32    `json:"id"`
	Count    [2]uint16 `json:"count"`
	Affinity [2]uint32 `json:"affinity"`
	Mark     [2]uint32 `json:"mark"`
}

// BackendKey mirrors struct backend_key: slot Slot of the frontend ID's
// backends in parity Parity, the key of BackendsMap.
type BackendKey struct {
	ID     uint32 `json:"id"`
	Slot   uint16 `json:"slot"`
	Parity uint8  `json:"parity"`
	Pad    uint8  `json:"-"`
}

// BackendValue mirrors struct backend_value. Port is in host byte order.
type BackendValue struct {
	Addr  Addr   `json:"addr"`
	Port  uint16 `json:"port"`
	Flags uint16 `json:"flags"` // BackendLocal
}

// BackendLocal in BackendValue.Flags: the backend is a pod of this node,
// so a connection an external frontend sends it is not masqueraded
// (BACKEND_LOCAL in bpf/lib/maps.h).
const BackendLocal uint16 = 1 << 0

// AffinityKey mirrors struct affinity_key: a client of the frontend ID,
// the key of AffinityMap.
type AffinityKey struct {
	ID     uint32 `json:"id"`
	Client Addr   `json:"client"`
}

// AffinityValue mirrors struct affinity_value: the backend (and its slot)
// the client's last connection went to, and when it was last used (a
// CLOCK_MONOTONIC time in nanoseconds, like CTEntry.Expires).
type AffinityValue struct {
	Last uint64 `json:"last"`
	Addr Addr   `json:"addr"`
	Port uint16 `json:"port"`
	Slot uint16 `json:"slot"`
	Pad  uint32 `json:"-"`
}

// CTCacheKey names one slot of one CPU's flow cache in a dump.
type CTCacheKey struct {
	CPU  int    `json:"cpu"`
	Slot uint32 `json:"slot"`
}

// CTAllowed is the CTEntry.Flags bit of a connection allowed in
// direction dir (0 ingress, 1 egress) from end o (0 or 1) of its key.
func CTAllowed(dir uint8, o int) uint32 { return 1 << (uint32(dir)<<1 | uint32(o)) }

// Counter mirrors struct counter: the per-CPU value of lockstep_drops,
// indexed by Reason.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Event mirrors struct event: one verdict record of lockstep_events.
type Event struct {
	Ifindex uint32 `json:"ifindex"`
	Dir     uint8  `json:"dir"`
	Verdict uint8  `json:"verdict"`
	Reason  Reason `json:"reason"`
	Proto   uint8  `json:"proto"`
	Sport   uint16 `json:"sport"`
	Dport   uint16 `json:"dport"`
	Peer    uint32 `json:"peer"`
	Saddr   Addr   `json:"saddr"`
	Daddr   Addr   `json:"daddr"`
	// Rule is the PolicyValue.Rule of the entry that allowed the
	// packet, 0 when no rule did (a drop, or a direction no policy
	// isolates).
	Rule uint32 `json:"rule"`
}

// Verdicts of Event.Verdict.
const (
	VerdictAllow uint8 = 0
	VerdictDrop  uint8 = 1
	// VerdictReject: dropped and answered, with a TCP reset or an ICMP
	// port unreachable, as kube-proxy refuses connections to a Service
	// without endpoints.
	VerdictReject uint8 = 2
)

// Reason indexes lockstep_drops and explains an Event (C: enum reason).
type Reason uint8

// Reasons.
const (
	ReasonAllowedNew    Reason = 0
	ReasonPolicyIngress Reason = 1
	ReasonPolicyEgress  Reason = 2
	// ReasonSpoofed counts what a pod sends from an address not its own,
	// and IPv6 packets from :: (but duplicate address detection) or from
	// an IPv4-mapped address.
	ReasonSpoofed    Reason = 3
	ReasonNoEndpoint Reason = 4
	// ReasonUnparseable counts packets that are not IP or whose headers
	// do not parse (non-first fragments where isolated), and packets no
	// network carries: IPv6 to :: or to an IPv4-mapped address, neighbour
	// discovery and MLD that break their RFCs' rules (bpf/lib/nd.h).
	ReasonUnparseable Reason = 5
	// ReasonAllowedNode counts the packets the node itself sent to a pod
	// whose ingress is isolated: allowed without policy (a pod cannot
	// block its own node, whose kubelet probes it) and tracked like
	// ReasonAllowedNew's.
	ReasonAllowedNode Reason = 6
	// ReasonServiceNoBackend counts the packets of new connections to a
	// Service frontend without a ready backend, which the dataplane
	// refuses (VerdictReject), or without one for this node's pods while
	// other nodes have some (internalTrafficPolicy Local), which it drops
	// (VerdictDrop), as kube-proxy does each.
	ReasonServiceNoBackend Reason = 7
	// ReasonCTShare counts the packets of new connections dropped
	// because their endpoint holds its whole conntrack share
	// (CTShareLimit) while the node's tables are under pressure
	// (CTPressure).
	ReasonCTShare Reason = 8
	// ReasonServicePortClash counts the first packets of new connections
	// to a Service frontend dropped because their translated tuple was
	// another live connection's and none of the source ports the
	// dataplane drew instead was free (the client's retry draws again).
	ReasonServicePortClash Reason = 9
	// NumReasons is the size of lockstep_drops (C: REASON_MAX).
	NumReasons = 10
)

var reasonNames = [...]string{
	ReasonAllowedNew:       "allowed-new",
	ReasonPolicyIngress:    "policy-ingress",
	ReasonPolicyEgress:     "policy-egress",
	ReasonSpoofed:          "spoofed-source",
	ReasonNoEndpoint:       "no-endpoint",
	ReasonUnparseable:      "unparseable",
	ReasonAllowedNode:      "allowed-node",
	ReasonServiceNoBackend: "service-no-backend",
	ReasonCTShare:          "conntrack-share",
	ReasonServicePortClash: "service-port-clash",
}

// Reasons lists the defined reasons in index order.
func Reasons() []Reason {
	return []Reason{ReasonAllowedNew, ReasonPolicyIngress, ReasonPolicyEgress, ReasonSpoofed, ReasonNoEndpoint, ReasonUnparseable, ReasonAllowedNode, ReasonServiceNoBackend, ReasonCTShare, ReasonServicePortClash}
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason-%d", uint8(r))
}

// MarshalText makes Reason a JSON string.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// DirString names a direction byte (0 ingress, 1 egress) as policy does.
func DirString(d uint8) string {
	if d == 0 {
		return "ingress"
	}
	return "egress"
}

// ProtoString names an IP protocol number.
func ProtoString(p uint8) string {
	switch p {
	case 0:
		return "other"
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", p)
}
