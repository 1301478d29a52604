package iptables

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ipSet is one ipset's content, desired or applied.
type ipSet struct {
	family Family
	net    bool // hash:net (a CIDR class); otherwise hash:ip
	// ipPort makes the set a hash:ip,port of Service frontends (address,
	// protocol and port): its members are in frontends, and entries is
	// empty. The only one is each family's set of frontends without a
	// backend (see services.go).
	ipPort    bool
	frontends map[policy.ServiceFrontend]struct{}
	// entries maps each member to its nomatch flag (hash:net only): the
	// most specific entry containing an address decides, and a nomatch one
	// says "not in the set".
	entries map[netip.Prefix]bool
	// unknown marks an applied set whose content is not known: a destroy
	// of it was attempted and may or may not have happened.
	unknown bool
}

func newSet(f Family, net bool) *ipSet {
	return &ipSet{family: f, net: net, entries: map[netip.Prefix]bool{}}
}

func newFrontendSet(f Family) *ipSet {
	return &ipSet{family: f, ipPort: true, frontends: map[policy.ServiceFrontend]struct{}{}, entries: map[netip.Prefix]bool{}}
}

func (s *ipSet) typ() string {
	switch {
	case s.ipPort:
		return "hash:ip,port"
	case s.net:
		return "hash:net"
	}
	return "hash:ip"
}

// sameType reports whether a and b are sets of the same type and family:
// one can be turned into the other by adding and deleting members.
func (s *ipSet) sameType(o *ipSet) bool {
	return s.family == o.family && s.net == o.net && s.ipPort == o.ipPort
}

// size is the number of members.
func (s *ipSet) size() int { return len(s.entries) + len(s.frontends) }

// maxElem bounds each set. The pods set holds every pod address of the
// cluster, so it is well above ipset's default of 65536.
const maxElem = 1 << 20

// hashSize is the hashsize a set created with n members starts with: about
// four members per bucket, a power of two from 64 (ipset's least) up. The
// default, 1024, wastes buckets on the many small sets and makes the
// kernel double and rehash a large one several times while ipset restore
// fills it: 200k members in 20 sets restored in 1.3-1.4 s with it, 0.7 s
// sized (measured in a throwaway netns). A set that grows later is
// resized by the kernel as before.
func hashSize(n int) int {
	size := 64
	for size*4 < n {
		size *= 2
	}
	return size
}

// plan is the complete desired state of one Apply: every set and, per
// family, every lockstep chain of the filter table and every Service
// chain of the nat table with its rules (the text after "-A CHAIN ",
// exactly as iptables-save prints it).
type plan struct {
	sets   map[string]*ipSet
	chains [2]map[string][]string
	nat    [2]map[string][]string
	// services are the frontends the plan was rendered from, for the
	// next Apply's order of commits (see shrinkNAT).
	services map[policy.ServiceFrontend]*policy.ServiceEntry
}

// epRender is one endpoint's rendered chains, kept between applies so an
// unchanged endpoint is not rendered again.
type epRender struct {
	ep   *policy.EndpointPolicy
	keys []policy.RuleKey // ep.Rules' keys in rule order
	// union maps the first rule of each group of identity rules sharing a
	// direction, protocol and ports to the group's union; merged marks
	// the group's other rules (see groupUnions).
	union  map[policy.RuleKey]string
	merged map[policy.RuleKey]bool
	refs   []ref // the sets its rules match, in a fixed order
	// chains[f] holds the family's [egress, ingress] rules, rendered for
	// sig[f]: which of refs have a non-empty set in that family.
	chains [2][2][]string
	sig    [2]string
	// The endpoint's chain names and its jumps from the hook chains, which
	// depend on its host ifname only.
	egressChain, ingressChain string
	jumpEgress, jumpIngress   string
}

// renderer turns a policy.Desired into a plan.
type renderer struct {
	mode Mode
	fams []Family
	// translate: the dataplane translates Services itself (nat chains).
	translate bool
	// svcs are the frontends' renders of the last plan.
	svcs map[policy.ServiceFrontend]*svcRender
	// lastNoep is, per family, the set of frontends without backends the
	// egress chains of the last render refused ("" for none).
	lastNoep [2]string
	// The sets of the last plan and what they were built from: reused
	// while the addresses, CIDRs and referenced sets stay the same.
	lastAddrs map[netip.Addr]policy.AddrEntry
	lastCIDRs map[netip.Prefix]policyapi.Peer
	lastRefs  map[ref]bool
	lastSets  map[string]*ipSet
	// lastHas is, per family, which referenced sets the last render found
	// non-empty. While it stays the same, an endpoint whose chains are
	// rendered needs no new signature: they were rendered for it.
	lastHas [2]map[ref]bool
	// unionHashes caches the name hash of every union in use.
	unionHashes map[string]string
}

// render builds the plan of want. cache holds the previous renders by host
// ifname; render returns the new cache. A rule whose set would be empty in
// a family matches nothing there: it is left out, and the set is not
// created (a cluster without IPv6 pods gets almost no IPv6 rules). The
// negated match of PeerWorld keeps its set, empty or not.
func (r *renderer) render(want *policy.Desired, cache map[string]*epRender) (*plan, map[string]*epRender, error) {
	if !sameMap(r.lastCIDRs, want.CIDRs) {
		// Classes are looked up unmapped (newCIDRIndex): a mapped IPv6
		// prefix would be an IPv4 one, as in the eBPF dataplane's keys.
		for pfx := range want.CIDRs {
			if err := policyapi.CheckNotMapped(pfx); err != nil {
				return nil, nil, fmt.Errorf("render CIDRs: %w", err)
			}
		}
	}
	names := slices.Sorted(maps.Keys(want.Endpoints))
	next := make(map[string]*epRender, len(names))
	refs := map[ref]bool{}
	for _, name := range names {
		ep := want.Endpoints[name]
		er := cache[name]
		switch {
		case er != nil && er.ep == ep:
		case er != nil && sameEndpoint(er.ep, ep):
			c := *er
			c.ep = ep
			er = &c
		default:
			var err error
			if er, err = newEPRender(name, ep); err != nil {
				return nil, nil, err
			}
		}
		next[name] = er
		for _, rf := range er.refs {
			refs[rf] = true
		}
	}
	if err := r.hashUnions(refs); err != nil {
		return nil, nil, err
	}
	svc, err := r.services(want, names)
	if err != nil {
		return nil, nil, err
	}
	p := &plan{sets: r.sets(want, refs), nat: svc.nat, services: want.Services}
	if svc.noep[0] != nil || svc.noep[1] != nil {
		p.sets = maps.Clone(p.sets) // the cached sets are shared with the applied state
	}
	for _, f := range r.fams {
		noep := ""
		if s := svc.noep[f.index()]; s != nil {
			noep = noepSetName(r.mode, f)
			p.sets[noep] = s
		}
		has := make(map[ref]bool, len(refs))
		for rf := range refs {
			name, _ := r.refSetName(f, rf)
			has[rf] = p.sets[name] != nil
		}
		nonEmpty := func(rf ref) bool { return has[rf] }
		sameHas := r.lastHas[f.index()] != nil && maps.Equal(has, r.lastHas[f.index()]) && r.lastNoep[f.index()] == noep
		r.lastHas[f.index()], r.lastNoep[f.index()] = has, noep
		chains := map[string][]string{}
		var fwd, in []string
		for _, name := range names {
			er := next[name]
			e, i := er.egressChain, er.ingressChain
			fwd = append(fwd, er.jumpEgress, er.jumpIngress)
			in = append(in, er.jumpEgress)
			if rendered := er.chains[f.index()][0] != nil; rendered && sameHas {
				// Rendered (here or by a render whose sets had the same
				// emptiness) for the signature it would get now.
				chains[e] = er.chains[f.index()][0]
				chains[i] = er.chains[f.index()][1]
				continue
			}
			sig := noep + ":" + signature(er.refs, nonEmpty)
			if er.chains[f.index()][0] == nil || er.sig[f.index()] != sig {
				if er == cache[name] {
					c := *er // cached renders are shared with the applied state
					er = &c
					next[name] = er
				}
				er.chains[f.index()] = r.renderEndpoint(f, er, nonEmpty, noep)
				er.sig[f.index()] = sig
			}
			chains[e] = er.chains[f.index()][0]
			chains[i] = er.chains[f.index()][1]
		}
		chains[chainForward], chains[chainInput] = fwd, in
		if noep != "" {
			chains[chainReject] = rejectRules(f)
		}
		if f == IPv6 {
			chains[chainLL6] = ll6Rules()
			chains[chainND6] = nd6Rules()
			chains[chainND6In] = nd6InRules()
		}
		p.chains[f.index()] = chains
	}
	return p, next, nil
}

// signature records which of refs have a set in a family.
func signature(refs []ref, nonEmpty func(ref) bool) string {
	b := make([]byte, len(refs))
	for i, rf := range refs {
		b[i] = '0'
		if nonEmpty(rf) {
			b[i] = '1'
		}
	}
	return string(b)
}

// sets returns the sets of want for the referenced refs: the last plan's
// when nothing they depend on changed. An incremental compiler hands the
// same map again when it did not change, which is checked first.
func (r *renderer) sets(want *policy.Desired, refs map[ref]bool) map[string]*ipSet {
	if r.lastSets != nil && maps.Equal(r.lastRefs, refs) &&
		(sameMap(r.lastCIDRs, want.CIDRs) || maps.Equal(r.lastCIDRs, want.CIDRs)) &&
		(sameMap(r.lastAddrs, want.Addrs) || maps.Equal(r.lastAddrs, want.Addrs)) {
		return r.lastSets
	}
	sets := r.fillSets(want, refs)
	r.lastAddrs, r.lastCIDRs, r.lastRefs, r.lastSets = want.Addrs, want.CIDRs, refs, sets
	return sets
}

// sameMap reports whether a and b are the same map object.
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return a != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// sameEndpoint reports whether a and b enforce the same policy.
func sameEndpoint(a, b *policy.EndpointPolicy) bool {
	return a.IPv4 == b.IPv4 && a.IPv6 == b.IPv6 &&
		a.IngressIsolated == b.IngressIsolated && a.EgressIsolated == b.EgressIsolated &&
		maps.EqualFunc(a.Rules, b.Rules, slices.Equal)
}

// newEPRender validates ep and orders its rules; the chains are rendered
// per family once the sets are known.
func newEPRender(name string, ep *policy.EndpointPolicy) (*epRender, error) {
	keys := slices.Collect(maps.Keys(ep.Rules))
	for _, k := range keys {
		if protoRank(k.Proto) < 0 {
			return nil, fmt.Errorf("render endpoint %s: rule for peer %d has protocol %d (want 0, 6, 17 or 132)", name, k.Peer, k.Proto)
		}
	}
	slices.SortFunc(keys, func(a, b policy.RuleKey) int {
		return cmp.Or(cmp.Compare(protoRank(a.Proto), protoRank(b.Proto)), cmp.Compare(a.Peer, b.Peer))
	})
	er := &epRender{ep: ep, keys: keys, egressChain: egressPrefix + name, ingressChain: ingressPrefix + name}
	er.jumpEgress, er.jumpIngress = "-i "+name+" -j "+er.egressChain, "-o "+name+" -j "+er.ingressChain
	er.union, er.merged = groupUnions(keys, ep.Rules)
	seen := map[ref]bool{}
	for _, k := range keys {
		rf := ref{peer: k.Peer}
		if u, ok := er.union[k]; ok {
			rf = ref{union: u}
		} else if _, ok := setName(ModeNFT, IPv4, k.Peer); !ok || er.merged[k] {
			continue
		}
		if !seen[rf] {
			seen[rf] = true
			er.refs = append(er.refs, rf)
		}
	}
	slices.SortFunc(er.refs, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.peer, b.peer), cmp.Compare(a.union, b.union))
	})
	return er, nil
}

// renderEndpoint renders the two chains of one endpoint in family f:
//
//	LOCKSTEP-E-<if>  anti-spoofing, the refusal of frontends without
//	                 backends, then (egress isolated) the egress policy
//	LOCKSTEP-I-<if>  (ingress isolated) the ingress policy; else empty
//
// An allowed packet RETURNs (lockstep only ever drops: what it allows
// continues through the node's other rules, as after the eBPF programs); a
// denied one is dropped, and a connection to a frontend in the set noep
// (when not "") refused. nonEmpty says which refs have a set in f.
func (r *renderer) renderEndpoint(f Family, er *epRender, nonEmpty func(ref) bool, noep string) [2][]string {
	ep := er.ep
	var egress []string
	if f == IPv4 {
		if ep.IPv4.IsValid() {
			egress = append(egress, "! -s "+netip.PrefixFrom(ep.IPv4, 32).String()+" -j DROP")
		} else {
			egress = append(egress, "-j DROP")
		}
	} else {
		if ep.IPv6.IsValid() {
			egress = append(egress, "! -s "+netip.PrefixFrom(ep.IPv6, 128).String()+" -j "+chainLL6)
		} else {
			egress = append(egress, "-j "+chainLL6)
		}
	}
	if noep != "" {
		egress = append(egress, "-m set --match-set "+noep+" dst,dst -j "+chainReject)
	}
	if f == IPv6 {
		// :: is never a destination (RFC 4291 2.5.2); an IPv4-mapped
		// address is the programs' key of an IPv4 one: they drop IPv6
		// packets to it (the kernel drops those from it). Neither these
		// nor ND and MLD are ever a frontend's.
		egress = append(egress, "-d ::/128 -j DROP", "-d ::ffff:0.0.0.0/96 -j DROP", "-p ipv6-icmp -j "+chainND6)
	}
	if ep.EgressIsolated {
		egress = append(egress, r.policyRules(f, policyapi.Egress, er, nonEmpty)...)
	}
	var ingress []string
	if f == IPv6 {
		// :: is never forwarded (RFC 4291 2.5.2), nor are ND and MLD.
		ingress = append(ingress, "-s ::/128 -j DROP", "-d ::/128 -j DROP", "-p ipv6-icmp -j "+chainND6In)
	}
	if ep.IngressIsolated {
		ingress = append(ingress, r.policyRules(f, policyapi.Ingress, er, nonEmpty)...)
	}
	return [2][]string{egress, ingress}
}

// protoRank orders rules: port protocols first, then the rest; -1 for a
// protocol a RuleKey cannot have.
func protoRank(proto uint8) int {
	switch proto {
	case policyapi.ProtoTCP:
		return 0
	case policyapi.ProtoUDP:
		return 1
	case policyapi.ProtoSCTP:
		return 2
	case policyapi.ProtoOther:
		return 3
	}
	return -1
}

var protoName = map[uint8]string{policyapi.ProtoTCP: "tcp", policyapi.ProtoUDP: "udp", policyapi.ProtoSCTP: "sctp"}

// policyRules renders the allow-list of one isolated direction: replies of
// accepted connections, then one rule per (peer, protocol, port chunk),
// then a drop. ProtoOther rules (every protocol without ports) come after
// TCP, UDP and SCTP are dropped, so a rule with ports never lets ICMP
// through and a ProtoOther rule never lets TCP through. Identity rules
// with the same protocol and ports are one rule matching their union set.
func (r *renderer) policyRules(f Family, dir policyapi.Direction, er *epRender, nonEmpty func(ref) bool) []string {
	word := "src"
	if dir == policyapi.Egress {
		word = "dst"
	}
	out := []string{"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"}
	if f == IPv6 && dir == policyapi.Egress {
		// What LOCKSTEP-ND6 let through passes without policy.
		for _, t := range append(slices.Clone(ndTypes), mldTypes...) {
			out = append(out, icmp6Type(t)+"-j RETURN")
		}
	}
	var other []string
	for _, k := range er.keys {
		if k.Dir != dir || er.merged[k] {
			continue
		}
		rf := ref{peer: k.Peer}
		if u, ok := er.union[k]; ok {
			rf = ref{union: u}
		}
		match, ok := r.refMatch(f, rf, word)
		if !ok || rf != (ref{peer: policyapi.PeerAny}) && !nonEmpty(rf) {
			continue
		}
		if k.Proto == policyapi.ProtoOther {
			other = append(other, match+"-j RETURN")
			continue
		}
		proto := protoName[k.Proto]
		for _, ports := range portMatches(proto, er.ep.Rules[k]) {
			out = append(out, "-p "+proto+" "+match+ports+"-j RETURN")
		}
	}
	if len(other) > 0 {
		out = append(out, "-p tcp -j DROP", "-p udp -j DROP", "-p sctp -j DROP")
		out = append(out, other...)
	}
	return append(out, "-j DROP")
}

// refMatch is the match of a rule for rf (with a trailing space), and
// false for a peer that matches nothing.
func (r *renderer) refMatch(f Family, rf ref, word string) (string, bool) {
	if rf == (ref{peer: policyapi.PeerAny}) {
		return "", true
	}
	name, ok := r.refSetName(f, rf)
	if !ok {
		return "", false
	}
	if rf == (ref{peer: policyapi.PeerWorld}) {
		return "-m set ! --match-set " + name + " " + word + " ", true
	}
	return "-m set --match-set " + name + " " + word + " ", true
}

// multiportSlots is how many ports one multiport match holds; a range
// takes two.
const multiportSlots = 15

// portMatches renders the destination port ranges of a rule as matches
// (each with a trailing space), as many as multiport's 15 slots need: ""
// for every port, none for no range at all (a rule that allows nothing).
func portMatches(proto string, ranges []policy.PortRange) []string {
	if len(ranges) == 0 {
		return nil
	}
	for _, pr := range ranges {
		if pr.Lo == 0 && pr.Hi == 65535 {
			return []string{""}
		}
	}
	if len(ranges) == 1 {
		return []string{"-m " + proto + " --dport " + portRange(ranges[0]) + " "}
	}
	var out, chunk []string
	slots := 0
	for _, pr := range ranges {
		n := 1
		if pr.Lo != pr.Hi {
			n = 2
		}
		if slots+n > multiportSlots {
			out = append(out, "-m multiport --dports "+strings.Join(chunk, ",")+" ")
			chunk, slots = nil, 0
		}
		chunk = append(chunk, portRange(pr))
		slots += n
	}
	return append(out, "-m multiport --dports "+strings.Join(chunk, ",")+" ")
}

func portRange(pr policy.PortRange) string {
	if pr.Lo == pr.Hi {
		return strconv.Itoa(int(pr.Lo))
	}
	return strconv.Itoa(int(pr.Lo)) + ":" + strconv.Itoa(int(pr.Hi))
}

// fillSets builds the sets the rules reference, with their members,
// leaving out the empty ones except PeerWorld's. A union set holds the
// addresses of all its identities.
func (r *renderer) fillSets(want *policy.Desired, refs map[ref]bool) map[string]*ipSet {
	sets := map[string]*ipSet{}
	// ids holds the members of every identity a rule matches, directly or
	// through a union; only the directly matched ones become sets.
	var ids [2]map[policyapi.Peer]*ipSet
	var pods [2]*ipSet
	classes := map[policyapi.Peer]bool{}
	var unions []string
	for rf := range refs {
		if rf.union != "" {
			unions = append(unions, rf.union)
		}
	}
	for _, f := range r.fams {
		ids[f.index()] = map[policyapi.Peer]*ipSet{}
		for _, u := range unions {
			for _, id := range unionIdentities(u) {
				if ids[f.index()][id] == nil {
					ids[f.index()][id] = newSet(f, false)
				}
			}
		}
		for rf := range refs {
			if rf.union != "" {
				continue
			}
			peer := rf.peer
			name, _ := setName(r.mode, f, peer)
			switch {
			case peer == policyapi.PeerWorld:
				pods[f.index()] = newSet(f, false)
				sets[name] = pods[f.index()]
			case peer&policyapi.CIDRClassBit != 0:
				classes[peer] = true
			default:
				s := ids[f.index()][peer]
				if s == nil {
					s = newSet(f, false)
					ids[f.index()][peer] = s
				}
				sets[name] = s
			}
		}
	}
	if len(refs) == 0 {
		return sets
	}
	for a, e := range want.Addrs {
		a = a.Unmap()
		f := familyOf(a)
		if ids[f.index()] == nil {
			continue // family disabled
		}
		host := netip.PrefixFrom(a, a.BitLen())
		if s := pods[f.index()]; s != nil {
			s.entries[host] = false
		}
		if s := ids[f.index()][e.Identity]; s != nil {
			s.entries[host] = false
		}
	}
	for _, f := range r.fams {
		for _, u := range unions {
			members := unionIdentities(u)
			n := 0
			for _, id := range members {
				n += len(ids[f.index()][id].entries)
			}
			s := &ipSet{family: f, entries: make(map[netip.Prefix]bool, n)}
			for _, id := range members {
				maps.Copy(s.entries, ids[f.index()][id].entries)
			}
			name, _ := r.refSetName(f, ref{union: u})
			sets[name] = s
		}
	}
	if len(classes) > 0 {
		maps.Copy(sets, r.netSets(want, classes))
	}
	for name, s := range sets {
		if len(s.entries) == 0 && !strings.HasSuffix(name, "-pods") {
			delete(sets, name)
		}
	}
	return sets
}

func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// netSets builds the hash:net set of every class in classes, such that an
// address is in the set of class C exactly when the eBPF dataplane gives
// it class C: for a pod address its AddrEntry.CIDRClass, for any other
// the class of its longest prefix in want.CIDRs.
//
// hash:net looks at the most specific entry containing an address, and a
// nomatch entry there means "not in the set". So each prefix of CIDRs goes
// into the set of its own class, and as nomatch into the sets of the
// classes of its ancestors (an ipBlock's except is such a prefix). A pod
// address whose class differs from its longest prefix's gets a host entry:
// a member in its own class's set, nomatch in the other. ipset refuses /0,
// so a default route of class C becomes the two /1 halves.
func (r *renderer) netSets(want *policy.Desired, classes map[policyapi.Peer]bool) map[string]*ipSet {
	idx := newCIDRIndex(want.CIDRs)
	out := map[string]*ipSet{}
	sets := map[[2]uint32]*ipSet{}
	for _, f := range r.fams {
		for c := range classes {
			name, _ := setName(r.mode, f, c)
			s := newSet(f, true)
			out[name] = s
			sets[[2]uint32{uint32(f), uint32(c)}] = s
		}
	}
	set := func(f Family, c policyapi.Peer) *ipSet { return sets[[2]uint32{uint32(f), uint32(c)}] }
	for pfx, c := range idx.m {
		f := familyOf(pfx.Addr())
		if pfx.Bits() == 0 {
			if s := set(f, c); s != nil {
				for _, half := range halves(f) {
					if _, listed := idx.m[half]; !listed {
						s.entries[half] = false
					}
				}
			}
			continue
		}
		if s := set(f, c); s != nil {
			s.entries[pfx] = false
		}
		for _, anc := range idx.ancestorClasses(pfx) {
			if s := set(f, anc); s != nil && anc != c {
				s.entries[pfx] = true
			}
		}
	}
	for a, e := range want.Addrs {
		a = a.Unmap()
		f := familyOf(a)
		lpm := idx.lookup(a)
		if lpm == e.CIDRClass {
			continue
		}
		host := netip.PrefixFrom(a, a.BitLen())
		if s := set(f, e.CIDRClass); s != nil {
			s.entries[host] = false
		}
		if s := set(f, lpm); s != nil {
			s.entries[host] = true
		}
	}
	return out
}

func halves(f Family) [2]netip.Prefix {
	if f == IPv4 {
		return [2]netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
	}
	return [2]netip.Prefix{netip.MustParsePrefix("::/1"), netip.MustParsePrefix("8000::/1")}
}

// cidrIndex is a longest-prefix-match view of Desired.CIDRs.
type cidrIndex struct {
	m    map[netip.Prefix]policyapi.Peer
	lens [2][]int // prefix lengths present, longest first, by family index
}

func newCIDRIndex(cidrs map[netip.Prefix]policyapi.Peer) *cidrIndex {
	x := &cidrIndex{m: make(map[netip.Prefix]policyapi.Peer, len(cidrs))}
	var seen [2]map[int]bool
	seen[0], seen[1] = map[int]bool{}, map[int]bool{}
	for pfx, c := range cidrs {
		if pfx.Addr().Is4In6() {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0))
		}
		pfx = pfx.Masked()
		x.m[pfx] = c
		seen[familyOf(pfx.Addr()).index()][pfx.Bits()] = true
	}
	for i := range seen {
		x.lens[i] = slices.Sorted(maps.Keys(seen[i]))
		slices.Reverse(x.lens[i])
	}
	return x
}

// lookup is the class of a's longest prefix (NoCIDRClass when none).
func (x *cidrIndex) lookup(a netip.Addr) policyapi.Peer {
	for _, l := range x.lens[familyOf(a).index()] {
		p, _ := a.Prefix(l)
		if c, ok := x.m[p]; ok {
			return c
		}
	}
	return policyapi.NoCIDRClass
}

// ancestorClasses lists the classes of the listed prefixes strictly
// containing pfx (with repeats).
func (x *cidrIndex) ancestorClasses(pfx netip.Prefix) []policyapi.Peer {
	var out []policyapi.Peer
	for _, l := range x.lens[familyOf(pfx.Addr()).index()] {
		if l >= pfx.Bits() {
			continue
		}
		anc, _ := pfx.Addr().Prefix(l)
		if c, ok := x.m[anc]; ok {
			out = append(out, c)
		}
	}
	return out
}
