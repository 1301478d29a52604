package hns

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ACL priorities, lowest first. HNS runs an endpoint's ACLs of a direction
// in this order and the first match decides. The tiers make lockstep's
// allow-list exact although HNS has no "every protocol but TCP, UDP and
// SCTP":
//
//   - prioPorts: allows for TCP, UDP and SCTP ports (per peer group and
//     port list), and of every protocol for peers a rule without ports
//     names;
//   - prioOtherBlock: peers whose rules allow portless protocols get TCP,
//     UDP and SCTP blocked here, so that
//   - prioOtherAllow: allowing every protocol from them only lets through
//     what prioPorts did not already decide;
//   - prioDefault: block the rest of an isolated direction (allow all in
//     a direction that is not isolated while the other one is, since HNS
//     turns an endpoint with any ACL default-deny).
const (
	prioPorts      uint16 = 100
	prioOtherBlock uint16 = 200
	prioOtherAllow uint16 = 300
	prioDefault    uint16 = 65000
)

// portProtocols are the protocols that have ports in lockstep's rules.
var portProtocols = []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP}

// target is what HNS must hold for one Desired: lockstep's SetPolicies by
// ID and its ACLs by endpoint name (no entry: no ACLs).
type target struct {
	sets map[string]SetPolicy
	acls map[string][]ACL
}

// peerSetID names the IPSET of a peer.
func peerSetID(p policyapi.Peer) string {
	switch {
	case p == policyapi.PeerWorld:
		return IDPrefix + "world"
	case p&policyapi.CIDRClassBit != 0:
		return IDPrefix + "cidr-" + strconv.FormatUint(uint64(p&^policyapi.CIDRClassBit), 10)
	default:
		return IDPrefix + "id-" + strconv.FormatUint(uint64(p), 10)
	}
}

// groupSetID names the NESTEDIPSET whose members are the IPSETs ids.
func groupSetID(ids []string) string {
	h := fnv.New64a()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{','})
	}
	return fmt.Sprintf("%sgrp-%016x", IDPrefix, h.Sum64())
}

// render computes the HNS state that enforces d.
func render(d *policy.Desired) (*target, error) {
	t := &target{sets: map[string]SetPolicy{}, acls: map[string][]ACL{}}
	r := &renderer{d: d, t: t}
	for name, ep := range d.Endpoints {
		acls, err := r.endpoint(ep)
		if err != nil {
			return nil, fmt.Errorf("render endpoint %s: %w", name, err)
		}
		if len(acls) > 0 {
			t.acls[name] = acls
		}
	}
	return t, nil
}

// renderer holds one render's caches.
type renderer struct {
	d       *policy.Desired
	t       *target
	members map[policyapi.Peer][]string // IPSET values of peers rendered so far
	regions map[policyapi.Peer][]netip.Prefix
}

// endpoint returns the ACLs of ep, creating the sets they reference.
func (r *renderer) endpoint(ep *policy.EndpointPolicy) ([]ACL, error) {
	isolated := [2]bool{ep.IngressIsolated, ep.EgressIsolated}
	if !isolated[policyapi.Ingress] && !isolated[policyapi.Egress] {
		return nil, nil
	}
	var acls []ACL
	for _, dir := range []policyapi.Direction{policyapi.Ingress, policyapi.Egress} {
		hd := directionOf(dir)
		if !isolated[dir] {
			acls = append(acls, ACL{Direction: hd, Action: Allow, Priority: prioDefault})
			continue
		}
		dirACLs, err := r.direction(ep, dir)
		if err != nil {
			return nil, err
		}
		acls = append(acls, dirACLs...)
		acls = append(acls, ACL{Direction: hd, Action: Block, Priority: prioDefault})
	}
	for i := range acls {
		acls[i].ID = fmt.Sprintf("%s%s-%d", IDPrefix, strings.ToLower(string(acls[i].Direction)), i)
	}
	return acls, nil
}

// direction returns the allow ACLs of ep's rules in dir (isolated).
func (r *renderer) direction(ep *policy.EndpointPolicy, dir policyapi.Direction) ([]ACL, error) {
	type group struct {
		proto  uint8
		ranges []policy.PortRange
		peers  []policyapi.Peer
	}
	groups := map[string]*group{}
	// A peer allowed every port of TCP, UDP and SCTP and the portless
	// protocols (a rule without ports) needs one ACL, not the tiers.
	every := map[policyapi.Peer]bool{}
	for k := range ep.Rules {
		if k.Dir != dir || k.Proto != policyapi.ProtoOther {
			continue
		}
		every[k.Peer] = !slices.ContainsFunc(portProtocols, func(p uint8) bool {
			rs := ep.Rules[policy.RuleKey{Peer: k.Peer, Dir: dir, Proto: p}]
			return len(rs) != 1 || rs[0] != (policy.PortRange{Lo: 0, Hi: 65535})
		})
	}
	for k, ranges := range ep.Rules {
		if k.Dir != dir {
			continue
		}
		if every[k.Peer] {
			if k.Proto == policyapi.ProtoOther {
				groups["every"] = cmp.Or(groups["every"], &group{proto: ProtocolAny})
				groups["every"].peers = append(groups["every"].peers, k.Peer)
			}
			continue
		}
		key := "other"
		if k.Proto != policyapi.ProtoOther {
			if len(ranges) == 1 && ranges[0] == (policy.PortRange{Lo: 0, Hi: 65535}) {
				ranges = nil
			}
			key = fmt.Sprintf("%d %v", k.Proto, ranges)
		}
		g := groups[key]
		if g == nil {
			g = &group{proto: k.Proto, ranges: ranges}
			groups[key] = g
		}
		g.peers = append(g.peers, k.Peer)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hd := directionOf(dir)
	var acls []ACL
	for _, key := range keys {
		g := groups[key]
		remote, err := r.remote(g.peers)
		if err != nil {
			return nil, err
		}
		if key == "every" {
			acls = append(acls, ACL{Direction: hd, Action: Allow, RemoteSets: remote, Priority: prioPorts})
			continue
		}
		if g.proto == policyapi.ProtoOther {
			for _, p := range portProtocols {
				acls = append(acls, ACL{Direction: hd, Action: Block, Protocol: p, RemoteSets: remote, Priority: prioOtherBlock})
			}
			acls = append(acls, ACL{Direction: hd, Action: Allow, RemoteSets: remote, Priority: prioOtherAllow})
			continue
		}
		a := ACL{Direction: hd, Action: Allow, Protocol: g.proto, RemoteSets: remote, Priority: prioPorts}
		if dir == policyapi.Ingress {
			a.LocalPorts = g.ranges
		} else {
			a.RemotePorts = g.ranges
		}
		acls = append(acls, a)
	}
	slices.SortStableFunc(acls, func(a, b ACL) int { return cmp.Compare(a.Priority, b.Priority) })
	return acls, nil
}

// remote returns the RemoteSets of an ACL for peers: nil when PeerAny is
// one of them, the peer's IPSET for one peer, else a NESTEDIPSET of the
// peers' IPSETs.
func (r *renderer) remote(peers []policyapi.Peer) ([]string, error) {
	if slices.Contains(peers, policyapi.PeerAny) {
		return nil, nil
	}
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, r.peerSet(p))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 1 {
		return ids, nil
	}
	id := groupSetID(ids)
	if prev, ok := r.t.sets[id]; ok && !slices.Equal(prev.Values, ids) {
		return nil, fmt.Errorf("nested set id %s collides for %v and %v", id, prev.Values, ids)
	}
	r.t.sets[id] = SetPolicy{ID: id, Name: id, Type: SetNestedIPSet, Values: ids}
	return []string{id}, nil
}

// peerSet creates the IPSET of peer p and returns its ID.
func (r *renderer) peerSet(p policyapi.Peer) string {
	id := peerSetID(p)
	if _, ok := r.t.sets[id]; ok {
		return id
	}
	var pfxs []netip.Prefix
	switch {
	case p == policyapi.PeerWorld:
		// Every address that is not a known pod's.
		var holes []netip.Prefix
		for a := range r.d.Addrs {
			holes = append(holes, netip.PrefixFrom(a, a.BitLen()))
		}
		pfxs = subtract(netip.MustParsePrefix("0.0.0.0/0"), holes)
		pfxs = append(pfxs, subtract(netip.MustParsePrefix("::/0"), holes)...)
	case p&policyapi.CIDRClassBit != 0:
		pfxs = r.classPrefixes(p)
	default:
		for a, e := range r.d.Addrs {
			if e.Identity == p {
				pfxs = append(pfxs, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
	r.t.sets[id] = SetPolicy{ID: id, Name: id, Type: SetIPSet, Values: prefixValues(pfxs)}
	return id
}

// classPrefixes returns disjoint prefixes covering exactly the addresses
// of CIDR class c as the eBPF dataplane classifies them: a pod address by
// its Addrs entry, any other address by the longest prefix of d.CIDRs
// that contains it.
func (r *renderer) classPrefixes(c policyapi.Peer) []netip.Prefix {
	if r.regions == nil {
		r.regions = lpmRegions(r.d.CIDRs)
	}
	var holes, pods []netip.Prefix
	for a, e := range r.d.Addrs {
		host := netip.PrefixFrom(a, a.BitLen())
		if e.CIDRClass == c {
			pods = append(pods, host)
		} else {
			holes = append(holes, host)
		}
	}
	var out []netip.Prefix
	for _, q := range r.regions[c] {
		out = append(out, subtract(q, holes)...)
	}
	for _, h := range pods {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Contains(h.Addr()) }) {
			out = append(out, h)
		}
	}
	return out
}

// lpmRegions splits the address space by longest-prefix match on cidrs:
// for each class, disjoint prefixes whose longest match in cidrs has that
// class.
func lpmRegions(cidrs map[netip.Prefix]policyapi.Peer) map[policyapi.Peer][]netip.Prefix {
	all := make([]netip.Prefix, 0, len(cidrs))
	for p := range cidrs {
		all = append(all, p)
	}
	out := map[policyapi.Peer][]netip.Prefix{}
	for q, class := range cidrs {
		var inside []netip.Prefix
		for _, p := range all {
			if p.Bits() > q.Bits() && q.Overlaps(p) {
				inside = append(inside, p)
			}
		}
		out[class] = append(out[class], subtract(q, inside)...)
	}
	return out
}

// subtract returns disjoint prefixes covering p minus every prefix in
// holes.
func subtract(p netip.Prefix, holes []netip.Prefix) []netip.Prefix {
	p = p.Masked()
	var relevant []netip.Prefix
	for _, h := range holes {
		if h.Addr().BitLen() != p.Addr().BitLen() || !h.Overlaps(p) {
			continue
		}
		if h.Bits() <= p.Bits() {
			return nil // h covers p
		}
		relevant = append(relevant, h)
	}
	if len(relevant) == 0 {
		return []netip.Prefix{p}
	}
	lo, hi := halves(p)
	return append(subtract(lo, relevant), subtract(hi, relevant)...)
}

// halves splits p (not a host prefix) into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	bit := p.Bits()
	b[bit/8] |= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits)
}

// prefixValues renders prefixes as IPSET values, a host prefix as its
// bare address, sorted as strings (as the client reads them back).
func prefixValues(pfxs []netip.Prefix) []string {
	out := make([]string, len(pfxs))
	for i, p := range pfxs {
		if p.IsSingleIP() {
			out[i] = p.Addr().String()
		} else {
			out[i] = p.String()
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
