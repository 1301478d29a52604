package iptables

import "strconv"

// The IPv6 link rules: what LOCKSTEP-LL6, LOCKSTEP-ND6 and LOCKSTEP-ND6-IN
// hold, the iptables side of the programs' bpf/lib/nd.h.

// ICMPv6 types of neighbour discovery (RFC 4861 4) and MLD (RFC 2710 3,
// RFC 3810 5).
const (
	icmp6MLDQuery   = 130
	icmp6MLDReport  = 131
	icmp6MLDDone    = 132
	icmp6RouterSol  = 133
	icmp6RouterAdv  = 134
	icmp6NeighSol   = 135
	icmp6NeighAdv   = 136
	icmp6Redirect   = 137
	icmp6MLD2Report = 143
)

// ndTypes and mldTypes are the ND and MLD types a pod may send, when they
// keep to the link (nd6Rules); a pod sends no router advertisement and no
// redirect.
var (
	ndTypes  = []int{icmp6RouterSol, icmp6NeighSol, icmp6NeighAdv}
	mldTypes = []int{icmp6MLDQuery, icmp6MLDReport, icmp6MLDDone, icmp6MLD2Report}
)

func icmp6Type(t int) string { return "-p ipv6-icmp -m icmp6 --icmpv6-type " + strconv.Itoa(t) + " " }

// ll6Rules is LOCKSTEP-LL6, where a pod's IPv6 packet from an address
// not its own goes: ICMPv6 from a link-local address passes on, and from
// :: only duplicate address detection (a neighbour solicitation to a
// solicited-node address, the MLDv2 report of that group); the rest is
// dropped, as the eBPF programs do (bpf/lib/nd.h).
func ll6Rules() []string {
	return []string{
		"-s fe80::/10 -p ipv6-icmp -j RETURN",
		"-s ::/128 -d ff02::1:ff00:0/104 " + icmp6Type(icmp6NeighSol) + "-j RETURN",
		"-s ::/128 -d ff02::16/128 " + icmp6Type(icmp6MLD2Report) + "-j RETURN",
		"-j DROP",
	}
}

// nd6Rules is LOCKSTEP-ND6, which every ICMPv6 packet a pod sends crosses
// after anti-spoofing: ND and MLD keep to the link as their RFCs say, as
// in the eBPF programs (nd_ok): to fe80::/10 or ff02::/16, ND with hop
// limit 255, MLD with hop limit 1 from a link-local source (or ::, which
// LOCKSTEP-LL6 let through only for an MLDv2 report to ff02::16); no
// router advertisement, no redirect. What passes returns, and the policy
// of an isolated egress lets it through (policyRules); other ICMPv6
// returns untouched. Fragmented ND (RFC 6980), which the programs drop,
// the node's own stack drops on receipt, and nothing forwards it: the
// rules need no fragment match.
func nd6Rules() []string {
	var out []string
	// In iptables-save's order: addresses, protocol, matches.
	for _, t := range ndTypes {
		out = append(out,
			"-d fe80::/10 "+icmp6Type(t)+"-m hl --hl-eq 255 -j RETURN",
			"-d ff02::/16 "+icmp6Type(t)+"-m hl --hl-eq 255 -j RETURN",
			icmp6Type(t)+"-j DROP")
	}
	out = append(out, icmp6Type(icmp6RouterAdv)+"-j DROP", icmp6Type(icmp6Redirect)+"-j DROP")
	for _, t := range mldTypes {
		out = append(out,
			"-s fe80::/10 -d fe80::/10 "+icmp6Type(t)+"-m hl --hl-eq 1 -j RETURN",
			"-s fe80::/10 -d ff02::/16 "+icmp6Type(t)+"-m hl --hl-eq 1 -j RETURN")
		if t == icmp6MLD2Report {
			out = append(out, "-s ::/128 -d ff02::16/128 "+icmp6Type(t)+"-m hl --hl-eq 1 -j RETURN")
		}
		out = append(out, icmp6Type(t)+"-j DROP")
	}
	return out
}

// nd6InRules is LOCKSTEP-ND6-IN: ND and MLD forwarded to a pod are
// dropped, as the programs drop them (a forwarded one is never valid: the
// forwarding lowered its hop limit). The node's own reach the pod through
// OUTPUT, which lockstep leaves alone.
func nd6InRules() []string {
	var out []string
	for _, t := range []int{icmp6MLDQuery, icmp6MLDReport, icmp6MLDDone, icmp6RouterSol, icmp6RouterAdv,
		icmp6NeighSol, icmp6NeighAdv, icmp6Redirect, icmp6MLD2Report} {
		out = append(out, icmp6Type(t)+"-j DROP")
	}
	return out
}
