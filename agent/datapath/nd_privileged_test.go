//go:build linux

package datapath

import (
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// Addresses of the link-control cases, beside the scenario's pod fd00::1.
const (
	podLL      = "fe80::2"         // the pod's link-local address
	nodeLL     = "fe80::1"         // the node's end of the link (the pod's gateway)
	podSN      = "ff02::1:ff00:1"  // solicited-node address of fd00::1
	allNodes   = "ff02::1"         // RFC 4291 2.7.1
	allRouters = "ff02::2"         // RFC 4291 2.7.1
	allMLDv2   = "ff02::16"        // RFC 3810 5.2.14
	llmnrGroup = "ff02::1:3"       // a link-scope group
	siteGroup  = "ff05::1:3"       // a site-scope group
	otherPod   = "fd00::2"         // another pod, to which egress policy allows ICMPv6
	spoofedV6  = "fd00::9"         // nobody's address on this link
	mappedPeer = "::ffff:10.0.0.2" // 10.0.0.2, IPv4-mapped
)

// ICMPv6 types of neighbour discovery (RFC 4861 4) and MLD (RFC 2710 3,
// RFC 3810 5).
const (
	mldQuery    = 130
	mldReport   = 131
	mldDone     = 132
	routerSol   = 133
	routerAdv   = 134
	neighSol    = 135
	neighAdv    = 136
	redirect    = 137
	mld2Report  = 143
	destUnreach = 1
)

// linkControlCases are ICMPv6 link-control messages and unspecified or
// IPv4-mapped addresses, each verdict derived from the RFC cited: by
// type, source (the pod's own address, someone else's, ::, link-local),
// destination (link-local, ff02::/16, global), hop limit, and for what
// reaches the pod, whether the node sent it or forwarded it. None
// depends on policy: each must hold with the pod isolated and open.
func linkControlCases() []verdictCase {
	eg, in := policyapi.Egress, policyapi.Ingress
	icmp := func(typ uint8, src, dst string, hl uint8) packet {
		return packet{src: src, dst: dst, proto: protoICMPv6, icmpType: typ, hopLimit: hl}
	}
	withHBH := func(p packet) packet { // MLD carries a router alert (RFC 2711)
		p.ext, p.extFirst = hbhThenICMPv6, 0
		return p
	}
	fromNode := func(p packet) packet { // sent by the node's own stack
		p.fromNode = true
		return p
	}
	fragmented := func(p packet) packet { // first fragment, next header ICMPv6
		p.ext, p.extFirst = []byte{protoICMPv6, 0, 0, 1, 0, 0, 0, 1}, 44
		return p
	}
	return []verdictCase{
		// Router solicitation (RFC 4861 4.1, 6.1.1): hop limit 255, to
		// all-routers; :: is refused (lockstep runs no router to answer).
		{"RS from link-local", eg, icmp(routerSol, podLL, allRouters, 255), actOK},
		{"RS from the pod's address", eg, icmp(routerSol, podV6, allRouters, 255), actOK},
		{"RS from ::", eg, icmp(routerSol, "::", allRouters, 255), actShot},
		{"RS from someone else's address", eg, icmp(routerSol, spoofedV6, allRouters, 255), actShot},
		{"RS with hop limit 64", eg, icmp(routerSol, podLL, allRouters, 64), actShot},
		{"RS to a global address", eg, icmp(routerSol, podLL, otherPod, 255), actShot},

		// Router advertisement and redirect (4.2, 4.5, 6.1.2, 8.1): only
		// routers send them, from link-local, hop limit 255; a pod is no
		// router (RFC 6104's rogue advertisement).
		{"RA from the pod", eg, icmp(routerAdv, podLL, allNodes, 255), actShot},
		{"redirect from the pod", eg, icmp(redirect, podLL, nodeLL, 255), actShot},
		{"redirect from the pod to a global address", eg, icmp(redirect, podV6, otherPod, 255), actShot},

		// Neighbour solicitation (4.3, 7.1.1, 7.2.2): hop limit 255; to a
		// solicited-node address, or unicast to the neighbour (NUD); from
		// :: only for duplicate address detection, to a solicited-node
		// address (RFC 4862 5.4.2); unfragmented (RFC 6980 5).
		{"NS from link-local", eg, icmp(neighSol, podLL, "ff02::1:ff00:2", 255), actOK},
		{"NS from the pod's address", eg, icmp(neighSol, podV6, "ff02::1:ff00:2", 255), actOK},
		{"NS unicast to the node (NUD)", eg, icmp(neighSol, podLL, nodeLL, 255), actOK},
		{"NS for DAD from ::", eg, icmp(neighSol, "::", podSN, 255), actOK},
		{"NS from :: to all-nodes", eg, icmp(neighSol, "::", allNodes, 255), actShot},
		{"NS from :: to link-local", eg, icmp(neighSol, "::", nodeLL, 255), actShot},
		{"NS from someone else's address", eg, icmp(neighSol, spoofedV6, podSN, 255), actShot},
		{"NS with hop limit 254", eg, icmp(neighSol, podLL, podSN, 254), actShot},
		{"NS from link-local to a global address", eg, icmp(neighSol, podLL, otherPod, 255), actShot},
		{"NS from the pod's address to a global address", eg, icmp(neighSol, podV6, otherPod, 255), actShot},
		{"NS fragmented", eg, fragmented(icmp(neighSol, podLL, podSN, 255)), actShot},

		// Neighbour advertisement (4.4, 7.1.2, 7.2.4): hop limit 255, from
		// an address of the sender (never ::), to the solicitation's
		// source or all-nodes.
		{"NA from link-local", eg, icmp(neighAdv, podLL, nodeLL, 255), actOK},
		{"NA from the pod's address to all-nodes", eg, icmp(neighAdv, podV6, allNodes, 255), actOK},
		{"NA from ::", eg, icmp(neighAdv, "::", allNodes, 255), actShot},
		{"NA from someone else's address", eg, icmp(neighAdv, spoofedV6, nodeLL, 255), actShot},
		{"NA with hop limit 64", eg, icmp(neighAdv, podLL, nodeLL, 64), actShot},
		{"NA to a global address", eg, icmp(neighAdv, podLL, otherPod, 255), actShot},

		// MLD (RFC 2710 3, RFC 3810 5): hop limit 1, a link-local source;
		// MLDv2 reports also from :: (5.2.13), to ff02::16 only.
		{"MLDv2 report from link-local", eg, withHBH(icmp(mld2Report, podLL, allMLDv2, 1)), actOK},
		{"MLDv2 report from ::", eg, withHBH(icmp(mld2Report, "::", allMLDv2, 1)), actOK},
		{"MLDv2 report from :: to all-nodes", eg, withHBH(icmp(mld2Report, "::", allNodes, 1)), actShot},
		{"MLDv2 report with hop limit 255", eg, withHBH(icmp(mld2Report, podLL, allMLDv2, 255)), actShot},
		{"MLDv2 report from the pod's address", eg, withHBH(icmp(mld2Report, podV6, allMLDv2, 1)), actShot},
		{"MLDv2 report from someone else's address", eg, withHBH(icmp(mld2Report, spoofedV6, allMLDv2, 1)), actShot},
		{"MLDv2 report to a global address", eg, withHBH(icmp(mld2Report, podLL, otherPod, 1)), actShot},
		{"MLDv1 report to a link-scope group", eg, withHBH(icmp(mldReport, podLL, llmnrGroup, 1)), actOK},
		{"MLDv1 report to a site-scope group", eg, withHBH(icmp(mldReport, podLL, siteGroup, 1)), actShot},
		{"MLDv1 report from ::", eg, withHBH(icmp(mldReport, "::", llmnrGroup, 1)), actShot},
		{"MLD done", eg, withHBH(icmp(mldDone, podLL, allRouters, 1)), actOK},
		{"MLD done with hop limit 2", eg, withHBH(icmp(mldDone, podLL, allRouters, 2)), actShot},

		// :: is a source for nothing else (RFC 4291 2.5.2), whatever the
		// policy: not even where the pod may send ICMPv6.
		{"echo from :: to a pod policy allows", eg, icmp(128, "::", otherPod, 64), actShot},
		{"echo from :: to link-local", eg, icmp(128, "::", nodeLL, 64), actShot},
		{"error from ::", eg, icmp(destUnreach, "::", otherPod, 64), actShot},
		// Nor a destination (RFC 4291 2.5.2): no connection to it.
		{"tcp to ::", eg, packet{src: podV6, dst: "::", proto: policyapi.ProtoTCP, sport: 40000, dport: 8443}, actShot},
		{"echo to ::", eg, icmp(128, podV6, "::", 64), actShot},

		// What reaches the pod: the node's own stack sends by the RFCs and
		// is the node's (as for isolation); a forwarded ND or MLD message
		// is never valid (RFC 4861 6.1, 7.1, 8.1: hop limit 255, which a
		// forwarder lowers; MLD's hop limit 1 is never forwarded).
		{"NS from the node", in, fromNode(icmp(neighSol, nodeLL, podSN, 255)), actOK},
		{"NS from the node for DAD", in, fromNode(icmp(neighSol, "::", "ff02::1:ff00:7", 255)), actOK},
		{"NS from the node to the pod's address (NUD)", in, fromNode(icmp(neighSol, nodeLL, podV6, 255)), actOK},
		{"NA from the node", in, fromNode(icmp(neighAdv, nodeLL, podLL, 255)), actOK},
		{"RS from the node", in, fromNode(icmp(routerSol, nodeLL, allRouters, 255)), actOK},
		{"RA from the node", in, fromNode(icmp(routerAdv, nodeLL, allNodes, 255)), actOK},
		{"redirect from the node", in, fromNode(icmp(redirect, nodeLL, podV6, 255)), actOK},
		{"MLD query from the node", in, fromNode(withHBH(icmp(mldQuery, nodeLL, allNodes, 1))), actOK},
		{"MLDv2 report from the node's ::", in, fromNode(withHBH(icmp(mld2Report, "::", allMLDv2, 1))), actOK},
		{"NS forwarded to the pod's address", in, icmp(neighSol, nodeLL, podV6, 254), actShot},
		{"NS forwarded, hop limit 255 as no forwarder leaves it", in, icmp(neighSol, spoofedV6, podV6, 255), actShot},
		{"NA forwarded", in, icmp(neighAdv, spoofedV6, podV6, 255), actShot},
		{"RA forwarded", in, icmp(routerAdv, nodeLL, allNodes, 254), actShot},
		{"redirect forwarded", in, icmp(redirect, spoofedV6, podV6, 63), actShot},
		{"MLD query forwarded", in, withHBH(icmp(mldQuery, spoofedV6, podV6, 1)), actShot},
		{"echo from :: forwarded to the pod", in, icmp(128, "::", podV6, 64), actShot},
		{"udp from :: forwarded to the pod", in, packet{src: "::", dst: podV6, proto: policyapi.ProtoUDP, sport: 40000, dport: 53}, actShot},
		{"echo from the node's ::", in, fromNode(icmp(128, "::", podV6, 64)), actOK},

		// IPv4-mapped addresses are how the programs key IPv4: an IPv6
		// packet must not be judged as if it were IPv4 (RFC 4291 2.5.5.2).
		{"tcp to an IPv4-mapped pod address", eg, packet{src: podV6, dst: mappedPeer, proto: policyapi.ProtoTCP, sport: 40000, dport: 80}, actShot},
		{"echo to an IPv4-mapped address", eg, icmp(128, podV6, mappedPeer, 64), actShot},
		{"udp from an IPv4-mapped ipBlock address", in, packet{src: "::ffff:192.168.9.9", dst: podV6, proto: policyapi.ProtoUDP, sport: 40000, dport: 53}, actShot},
	}
}

// TestPrivilegedVerdictLinkControl runs linkControlCases with the pod
// isolated both ways and open both ways: ND and MLD are judged by the
// RFCs' rules alone, before and without policy, and only after
// anti-spoofing.
func TestPrivilegedVerdictLinkControl(t *testing.T) {
	testenv.Privileged(t)
	for _, isolated := range []bool{true, false} {
		name := "open"
		if isolated {
			name = "isolated"
		}
		t.Run(name, func(t *testing.T) {
			d := newTestDatapath(t)
			d.fakeAttach(podIf, loIfindex)
			mustApply(t, d, scenario(isolated, isolated))
			checkVerdicts(t, d, linkControlCases())
		})
	}
}

// The node may send its pod a packet from :: (its own are the node's), but
// nothing answers ::: the pod's reply is a new packet, dropped, not the
// reply of a tracked connection.
func TestPrivilegedVerdictNoReplyToUnspecified(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	req := packet{src: "::", dst: podV6, proto: protoICMPv6, sport: 9, fromNode: true}
	reply := packet{src: podV6, dst: "::", proto: protoICMPv6, sport: 9, icmpType: 129}
	if got := run(t, d.toPod, req); got != actOK {
		t.Fatalf("echo from the node's ::: got %s, want OK", actName(got))
	}
	if got := run(t, d.fromPod, reply); got != actShot {
		t.Errorf("the pod's reply to ::: got %s, want SHOT", actName(got))
	}
}

// Each drop of the link rules is counted under the reason maps documents:
// a source no pod may use as spoofed-source, a message no link carries as
// unparseable.
func TestPrivilegedVerdictLinkControlReasons(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	for _, tc := range []struct {
		name   string
		pkt    packet
		reason bpfmaps.Reason
	}{
		{"echo from ::", packet{src: "::", dst: otherPod, proto: protoICMPv6, sport: 1}, bpfmaps.ReasonSpoofed},
		{"udp from an IPv4-mapped address", packet{src: "::ffff:10.0.0.1", dst: otherPod, proto: policyapi.ProtoUDP, sport: 1, dport: 53}, bpfmaps.ReasonSpoofed},
		{"NS with hop limit 64", packet{src: podLL, dst: podSN, proto: protoICMPv6, icmpType: neighSol, hopLimit: 64}, bpfmaps.ReasonUnparseable},
		{"RA from the pod", packet{src: podLL, dst: allNodes, proto: protoICMPv6, icmpType: routerAdv, hopLimit: 255}, bpfmaps.ReasonUnparseable},
		{"tcp to an IPv4-mapped address", packet{src: podV6, dst: mappedPeer, proto: policyapi.ProtoTCP, sport: 1, dport: 80}, bpfmaps.ReasonUnparseable},
		{"tcp to ::", packet{src: podV6, dst: "::", proto: policyapi.ProtoTCP, sport: 1, dport: 80}, bpfmaps.ReasonUnparseable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := counter(t, d, tc.reason)
			if got := run(t, d.fromPod, tc.pkt); got != actShot {
				t.Fatalf("got %s, want SHOT", actName(got))
			}
			if n := counter(t, d, tc.reason) - before; n != 1 {
				t.Errorf("%s counted %d times, want 1", tc.reason, n)
			}
		})
	}
}
