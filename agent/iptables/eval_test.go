package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// testPacket is a packet at one of the hooks lockstep uses.
type testPacket struct {
	hook        string // FORWARD, INPUT or OUTPUT
	in, out     string // interfaces ("" for none)
	src, dst    netip.Addr
	proto       uint8 // IP protocol number
	dport       uint16
	icmpType    uint8
	hopLimit    uint8 // IPv6 hop limit (64 when zero)
	established bool  // conntrack says ESTABLISHED
	dnat        bool  // conntrack says DNAT (the nat table translated it)
}

const (
	protoICMP   = 1
	protoICMPv6 = 58
)

func (p testPacket) String() string {
	return fmt.Sprintf("%s in=%s out=%s %s->%s proto=%d dport=%d icmp=%d hl=%d est=%v", p.hook, p.in, p.out, p.src, p.dst, p.proto, p.dport, p.icmpType, p.hl(), p.established)
}

// hl is p's hop limit.
func (p testPacket) hl() uint8 {
	if p.hopLimit == 0 {
		return 64
	}
	return p.hopLimit
}

// evalFake runs p through the filter table of mode m in the fake and
// reports whether it is accepted. Only the matches lockstep writes are
// understood; anything else fails the evaluation.
func (n *fakeNode) evalFake(m Mode, p testPacket) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, err := n.filterVerdict(m, p)
	return v == "ACCEPT", err
}

// filterVerdict is what the filter table of mode m does with p: ACCEPT,
// DROP, or REJECT followed by the rule's --reject-with ("REJECT
// tcp-reset"). Called with n.mu held.
func (n *fakeNode) filterVerdict(m Mode, p testPacket) (string, error) {
	t := n.tables[tableKey{m, familyOf(p.src), "filter"}]
	if t == nil {
		return "ACCEPT", nil
	}
	v, err := n.evalChain(t, p.hook, p, 0)
	if err != nil {
		return "", err
	}
	if v == "" || v == "RETURN" {
		if t.policy[p.hook] == "DROP" {
			return "DROP", nil
		}
		return "ACCEPT", nil
	}
	return v, nil
}

// evalChain returns the terminal verdict (ACCEPT, DROP, REJECT ...),
// "RETURN" for an explicit return, or "" when the chain ran out.
func (n *fakeNode) evalChain(t *fakeTable, chain string, p testPacket, depth int) (string, error) {
	if depth > 8 {
		return "", fmt.Errorf("jump depth exceeded at %s", chain)
	}
	for _, r := range t.chains[chain] {
		ok, target, err := n.matchRule(r, p)
		if err != nil {
			return "", fmt.Errorf("chain %s rule %q: %w", chain, r, err)
		}
		if !ok {
			continue
		}
		if target == "ACCEPT" || target == "DROP" || target == "RETURN" || isReject(target) {
			return target, nil
		}
		v, err := n.evalChain(t, target, p, depth+1)
		if err != nil {
			return "", err
		}
		if v == "ACCEPT" || v == "DROP" || isReject(v) {
			return v, nil
		}
	}
	return "", nil
}

// isReject reports whether a verdict refuses the packet: "REJECT", with
// the kind of answer after a space.
func isReject(v string) bool { return v == "REJECT" || strings.HasPrefix(v, "REJECT ") }

// tokens splits a rule, keeping a quoted comment as one token.
func tokens(r string) []string {
	var out []string
	for len(r) > 0 {
		r = strings.TrimLeft(r, " ")
		if r == "" {
			break
		}
		if r[0] == '"' {
			end := strings.IndexByte(r[1:], '"')
			out = append(out, r[1:end+1])
			r = r[end+2:]
			continue
		}
		tok, rest, _ := strings.Cut(r, " ")
		out = append(out, tok)
		r = rest
	}
	return out
}

var protoNumbers = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132, "ipv6-icmp": 58, "icmp": 1}

func (n *fakeNode) matchRule(r string, p testPacket) (bool, string, error) {
	tok := tokens(r)
	neg := false
	match := true
	target, rejectWith := "", ""
	check := func(b bool) {
		if b == neg {
			match = false
		}
		neg = false
	}
	for i := 0; i < len(tok); i++ {
		arg := func() string {
			i++
			return tok[i]
		}
		switch tok[i] {
		case "!":
			neg = true
		case "-s", "-d":
			pfx := netip.MustParsePrefix(arg())
			a := p.src
			if tok[i-1] == "-d" {
				a = p.dst
			}
			check(pfx.Contains(a))
		case "-i":
			check(arg() == p.in)
		case "-o":
			check(arg() == p.out)
		case "-p":
			check(protoNumbers[arg()] == p.proto)
		case "-m":
			switch arg() {
			case "tcp", "udp", "sctp", "multiport", "set", "conntrack", "icmp6", "comment", "statistic", "recent", "hl":
			default:
				return false, "", fmt.Errorf("unknown match %s", tok[i])
			}
		case "--dport":
			lo, hi := parseRange(arg())
			check(p.dport >= lo && p.dport <= hi)
		case "--dports":
			in := false
			for _, part := range strings.Split(arg(), ",") {
				lo, hi := parseRange(part)
				in = in || p.dport >= lo && p.dport <= hi
			}
			check(in)
		case "--match-set":
			name, dir := arg(), arg()
			s := n.sets[name]
			if s == nil {
				return false, "", fmt.Errorf("set %s missing", name)
			}
			switch dir {
			case "src":
				check(setContains(s, p.src))
			case "dst":
				check(setContains(s, p.dst))
			case "dst,dst":
				if !s.ipPort {
					return false, "", fmt.Errorf("set %s matched by address and port", name)
				}
				_, in := s.frontends[policy.ServiceFrontend{Addr: p.dst, Port: p.dport, Proto: p.proto}]
				check(in)
			default:
				return false, "", fmt.Errorf("set %s matched by %s", name, dir)
			}
		case "--ctstate":
			states := arg()
			check(strings.Contains(states, "ESTABLISHED") && p.established || strings.Contains(states, "DNAT") && p.dnat)
		case "--mode", "--probability", "--seconds", "--name", "--mask":
			// statistic and recent: evalNAT decides them (see natRule).
			arg()
		case "--update", "--rcheck", "--set", "--reap", "--rsource":
		case "--to-destination":
			arg()
		case "--reject-with":
			rejectWith = arg()
		case "--icmpv6-type":
			v, _ := strconv.Atoi(arg())
			check(p.proto == protoICMPv6 && int(p.icmpType) == v)
		case "--hl-eq":
			v, _ := strconv.Atoi(arg())
			check(int(p.hl()) == v)
		case "--comment":
			arg()
		case "-j":
			target = arg()
		default:
			return false, "", fmt.Errorf("unknown token %s", tok[i])
		}
	}
	if target == "REJECT" && rejectWith != "" {
		target += " " + rejectWith
	}
	return match, target, nil
}

func parseRange(s string) (uint16, uint16) {
	a, b, ok := strings.Cut(s, ":")
	lo, _ := strconv.Atoi(a)
	hi := lo
	if ok {
		hi, _ = strconv.Atoi(b)
	}
	return uint16(lo), uint16(hi)
}

// setContains is a set lookup: hash:net decides by the most specific
// entry containing a, which must not be nomatch.
func setContains(s *ipSet, a netip.Addr) bool {
	for bits := a.BitLen(); bits >= 0; bits-- {
		pfx, _ := a.Prefix(bits)
		if nomatch, ok := s.entries[pfx]; ok {
			return !nomatch
		}
		if !s.net {
			return false
		}
	}
	return false
}

// ingressIfindex is the skb->ingress_ifindex p reaches to_pod with: 0
// for a packet the node's own stack sent (hook OUTPUT), else that of the
// interface it arrived on (FORWARD: received from a pod or the network).
func ingressIfindex(p testPacket) int {
	if p.hook == "OUTPUT" {
		return 0
	}
	return 2 + slices.Index(semIfs, p.in) // eth0, no pod's, is 1
}

// refAllowed is what the eBPF programs decide for p (bpf/endpoint.c,
// bpf/lib/policy.h, bpf/lib/nd.h), with p's hook saying which programs it
// crosses: from_pod of p.in (FORWARD, INPUT) and to_pod of p.out
// (FORWARD, OUTPUT). to_pod leaves the node's own packets (ingress_ifindex
// 0) to no policy and no link rule. ND and MLD pass without policy when
// a pod sends them as their RFCs allow, and never when forwarded to one.
func refAllowed(d *policy.Desired, p testPacket) bool {
	if ep := d.Endpoints[p.in]; ep != nil && p.hook != "OUTPUT" {
		if !linkOK(p) || !sourceOK(ep, p) {
			return false
		}
		if isND(p) {
			if !ndOK(p) {
				return false
			}
		} else if ep.EgressIsolated && !p.established && !refPolicy(d, ep, policyapi.Egress, p.dst, p) {
			return false
		}
	}
	if ep := d.Endpoints[p.out]; ep != nil && p.hook != "INPUT" && ingressIfindex(p) != 0 {
		if !linkOK(p) || isND(p) {
			return false
		}
		if ep.IngressIsolated && !p.established && !refPolicy(d, ep, policyapi.Ingress, p.src, p) {
			return false
		}
	}
	return true
}

// sourceOK is anti-spoofing: the pod's own address, or for ICMPv6 a
// link-local one, or :: where linkOK allows it.
func sourceOK(ep *policy.EndpointPolicy, p testPacket) bool {
	if p.src.Is4() {
		return ep.IPv4.IsValid() && p.src == ep.IPv4
	}
	if ep.IPv6.IsValid() && p.src == ep.IPv6 || p.src == netip.IPv6Unspecified() {
		return true
	}
	return p.proto == protoICMPv6 && netip.MustParsePrefix("fe80::/10").Contains(p.src)
}

var (
	solicitedNode = netip.MustParsePrefix("ff02::1:ff00:0/104")
	allMLDv2      = netip.MustParseAddr("ff02::16")
	linkLocal     = netip.MustParsePrefix("fe80::/10")
	linkMcast     = netip.MustParsePrefix("ff02::/16")
	v4Mapped      = netip.MustParsePrefix("::ffff:0:0/96")
)

// linkOK reports whether an IPv6 packet keeps the rules of any address:
// :: only as the source of duplicate address detection, never as the
// destination, no IPv4-mapped address.
func linkOK(p testPacket) bool {
	if p.src.Is4() {
		return true
	}
	if v4Mapped.Contains(p.src) || v4Mapped.Contains(p.dst) || p.dst == netip.IPv6Unspecified() {
		return false
	}
	if p.src != netip.IPv6Unspecified() {
		return true
	}
	return p.proto == protoICMPv6 && (p.icmpType == 135 && solicitedNode.Contains(p.dst) || p.icmpType == 143 && p.dst == allMLDv2)
}

// isND reports whether p is neighbour discovery or MLD.
func isND(p testPacket) bool {
	return p.proto == protoICMPv6 && (p.icmpType >= 130 && p.icmpType <= 137 || p.icmpType == 143)
}

// ndOK is nd_ok: an ND or MLD message a pod may send.
func ndOK(p testPacket) bool {
	if !linkLocal.Contains(p.dst) && !linkMcast.Contains(p.dst) {
		return false
	}
	switch p.icmpType {
	case 133, 135, 136:
		return p.hl() == 255
	case 134, 137:
		return false
	}
	return p.hl() == 1 && (linkLocal.Contains(p.src) || p.src == netip.IPv6Unspecified())
}

func refPolicy(d *policy.Desired, ep *policy.EndpointPolicy, dir policyapi.Direction, remote netip.Addr, p testPacket) bool {
	identity, class := policyapi.PeerWorld, newCIDRIndex(d.CIDRs).lookup(remote)
	if e, ok := d.Addrs[remote]; ok {
		identity, class = e.Identity, e.CIDRClass
	}
	proto := p.proto
	if protoRank(proto) < 0 {
		proto = policyapi.ProtoOther
	}
	allows := func(peer policyapi.Peer) bool {
		ranges, ok := ep.Rules[policy.RuleKey{Peer: peer, Dir: dir, Proto: proto}]
		if !ok {
			return false
		}
		if proto == policyapi.ProtoOther {
			return true
		}
		for _, r := range ranges {
			if p.dport >= r.Lo && p.dport <= r.Hi {
				return true
			}
		}
		return false
	}
	return allows(identity) || class != policyapi.NoCIDRClass && allows(class) || allows(policyapi.PeerAny)
}
