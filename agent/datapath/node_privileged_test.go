//go:build linux

package datapath

import (
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// Addresses the node sends from in the node-traffic tests: the host
// veth's link address and an IPv6 address of the node, both the world to
// policy.
const (
	nodeV4 = "169.254.1.1"
	nodeV6 = "fd00:ffff::1"
)

// defaultDenyIngress is the verdict scenario with every ingress rule
// removed: ingress isolated with nothing allowed, egress isolated with
// the scenario's rules (none of which allows a reply to the node).
func defaultDenyIngress() *policy.Desired {
	d := scenario(true, true)
	for k := range d.Endpoints[podIf].Rules {
		if k.Dir == policyapi.Ingress {
			delete(d.Endpoints[podIf].Rules, k)
		}
	}
	return d
}

// replyFrame is the frame of the pod's reply to p: addresses and ports
// swapped, an ICMP echo request answered by an echo reply.
func replyFrame(p packet) []byte {
	r := packet{src: p.dst, dst: p.src, proto: p.proto, sport: p.dport, dport: p.sport}
	switch p.proto {
	case protoICMP:
		r.sport = p.sport // the echo id
		raw := frame(r)
		raw[14+20] = 0 // echo reply; the builder writes 0 as a request
		return raw
	case protoICMPv6:
		r.sport, r.icmpType = p.sport, 129
	}
	return frame(r)
}

// A packet the node's own stack sent (ingress_ifindex 0) passes a pod's
// default-deny ingress, counted as allowed-node, and the pod's reply
// passes its isolated egress as the reply of a tracked connection. The
// same packet forwarded by the node (from another pod or node) is
// judged by policy and dropped, and leaves no entry behind.
func TestPrivilegedVerdictNodeTraffic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, defaultDenyIngress())
	for _, tc := range []struct {
		name string
		pkt  packet
	}{
		{"v4 tcp", packet{src: nodeV4, dst: podV4, proto: policyapi.ProtoTCP, sport: 40000, dport: 8080}},
		{"v4 udp", packet{src: nodeV4, dst: podV4, proto: policyapi.ProtoUDP, sport: 40000, dport: 53}},
		{"v4 icmp echo", packet{src: nodeV4, dst: podV4, proto: protoICMP, sport: 77}},
		{"v6 tcp", packet{src: nodeV6, dst: podV6, proto: policyapi.ProtoTCP, sport: 40000, dport: 8080}},
		{"v6 udp", packet{src: nodeV6, dst: podV6, proto: policyapi.ProtoUDP, sport: 40000, dport: 53}},
		{"v6 icmpv6 echo", packet{src: nodeV6, dst: podV6, proto: protoICMPv6, sport: 77}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			forwarded, local := tc.pkt, tc.pkt
			local.fromNode = true
			reply := replyFrame(tc.pkt)

			before := counter(t, d, bpfmaps.ReasonPolicyIngress)
			if got := run(t, d.toPod, forwarded); got != actShot {
				t.Errorf("forwarded by the node: got %s, want SHOT", actName(got))
			}
			if got := counter(t, d, bpfmaps.ReasonPolicyIngress) - before; got != 1 {
				t.Errorf("forwarded by the node: policy-ingress grew by %d, want 1", got)
			}
			if got := runRaw(t, d.fromPod, reply); got != actShot {
				t.Errorf("reply to the dropped packet: got %s, want SHOT (isolated egress, no connection)", actName(got))
			}

			before = counter(t, d, bpfmaps.ReasonAllowedNode)
			if got := run(t, d.toPod, local); got != actOK {
				t.Errorf("sent by the node: got %s, want OK", actName(got))
			}
			if got := counter(t, d, bpfmaps.ReasonAllowedNode) - before; got != 1 {
				t.Errorf("sent by the node: allowed-node grew by %d, want 1", got)
			}
			if got := runRaw(t, d.fromPod, reply); got != actOK {
				t.Errorf("the pod's reply: got %s, want OK (conntrack)", actName(got))
			}
		})
	}
}

// Only a pod's ingress is open to its node: what the pod sends to the
// node's addresses is judged by its egress policy like any other
// address; and an ingress that is not isolated counts the node's
// connections as allowed-new, as everyone's.
func TestPrivilegedVerdictNodeTrafficEgressAndOpenIngress(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	tcp := policyapi.ProtoTCP
	for _, tc := range []struct {
		name   string
		state  *policy.Desired
		dir    policyapi.Direction
		pkt    packet
		want   uint32
		reason bpfmaps.Reason
	}{
		{"pod to the node, no egress rule", defaultDenyIngress(), policyapi.Egress,
			packet{src: podV4, dst: nodeV4, proto: tcp, sport: 40000, dport: 10250}, actShot, bpfmaps.ReasonPolicyEgress},
		{"pod to the node v6, no egress rule", defaultDenyIngress(), policyapi.Egress,
			packet{src: podV6, dst: nodeV6, proto: tcp, sport: 40000, dport: 10250}, actShot, bpfmaps.ReasonPolicyEgress},
		{"pod to the node, world rule", defaultDenyIngress(), policyapi.Egress,
			packet{src: podV4, dst: nodeV4, proto: tcp, sport: 40000, dport: 8443}, actOK, bpfmaps.ReasonAllowedNew},
		{"node to a pod whose ingress is open", scenario(false, true), policyapi.Ingress,
			packet{src: nodeV4, dst: podV4, proto: tcp, sport: 40000, dport: 8080, fromNode: true}, actOK, bpfmaps.ReasonAllowedNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustApply(t, d, tc.state)
			d.flushCT(t)
			before := counter(t, d, tc.reason)
			if got := run(t, d.progFor(tc.dir), tc.pkt); got != tc.want {
				t.Errorf("%s %+v: got %s, want %s", tc.dir, tc.pkt, actName(got), actName(tc.want))
			}
			if got := counter(t, d, tc.reason) - before; got != 1 {
				t.Errorf("%s grew by %d, want 1", tc.reason, got)
			}
		})
	}
}

// A non-first fragment has no ports to judge, so an isolated ingress
// drops it; one the node itself sent passes, as in a direction that is
// not isolated.
func TestPrivilegedVerdictNodeFragment(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, defaultDenyIngress())
	frag := packet{src: nodeV4, dst: podV4, proto: policyapi.ProtoUDP, fragOff: 100}
	local := frag
	local.fromNode = true
	if got := run(t, d.toPod, frag); got != actShot {
		t.Errorf("forwarded fragment: got %s, want SHOT", actName(got))
	}
	if got := run(t, d.toPod, local); got != actOK {
		t.Errorf("the node's fragment: got %s, want OK", actName(got))
	}
}

// lockstep monitor shows why the node's packet passed.
func TestPrivilegedVerdictNodeTrafficEvent(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, defaultDenyIngress())
	rd, err := d.Events()
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	defer rd.Close()
	run(t, d.toPod, packet{src: nodeV4, dst: podV4, proto: policyapi.ProtoTCP, sport: 4321, dport: 8080, fromNode: true})
	rd.SetDeadline(time.Now().Add(time.Second))
	ev, err := rd.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := bpfmaps.Event{
		Ifindex: loIfindex, Dir: uint8(policyapi.Ingress), Verdict: bpfmaps.VerdictAllow, Reason: bpfmaps.ReasonAllowedNode,
		Proto: policyapi.ProtoTCP, Sport: 4321, Dport: 8080,
		Saddr: bpfmaps.AddrFrom(addr(nodeV4)), Daddr: bpfmaps.AddrFrom(addr(podV4)),
	}
	if ev != want {
		t.Errorf("event\n got %+v\nwant %+v", ev, want)
	}
}

// Real TCP through a veth, under default-deny ingress and an egress
// isolated with no rule: a connection the node itself opens to the pod
// completes in both families (the pod's replies pass as a tracked
// connection's), and the same connection from a remote host the node
// routes is dropped.
func TestPrivilegedNodeToPodTraffic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	node, pod := newVethPair(t, "lsnt-h0", "lsnt-p0")
	remote := addRemote(t, node, pod, "lsnt-r0", "lsnt-p0")
	servers := []string{"10.99.0.2:8080", "[fd99::2]:8080"}
	for _, a := range servers {
		l, err := nodesim.ServeTCP(pod, a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		up := true
		for _, a := range servers {
			up = up && nodesim.Connects(node, a, time.Second) && nodesim.Connects(remote, a, time.Second)
		}
		if up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the topology does not pass traffic without lockstep")
		}
	}

	if err := node.Do(func(ns.NetNS) error { return d.Attach("lsnt-h0") }); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	mustApply(t, d, &policy.Desired{
		Addrs: map[netipAddr]policy.AddrEntry{
			addr("10.99.0.2"): {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
			addr("fd99::2"):   {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs: map[netipPrefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{"lsnt-h0": {
			IPv4: addr("10.99.0.2"), IPv6: addr("fd99::2"), IngressIsolated: true, EgressIsolated: true,
		}},
	})
	for _, a := range servers {
		nodeBefore, dropsBefore := counter(t, d, bpfmaps.ReasonAllowedNode), counter(t, d, bpfmaps.ReasonPolicyIngress)
		if !nodesim.Connects(node, a, 2*time.Second) {
			t.Errorf("node to %s: no connection, want one (a pod never blocks its node)", a)
		}
		if nodesim.Connects(remote, a, 700*time.Millisecond) {
			t.Errorf("remote to %s: connected through default-deny ingress", a)
		}
		if got := counter(t, d, bpfmaps.ReasonAllowedNode) - nodeBefore; got == 0 {
			t.Errorf("node to %s: allowed-node did not grow", a)
		}
		if got := counter(t, d, bpfmaps.ReasonPolicyIngress) - dropsBefore; got == 0 {
			t.Errorf("remote to %s: policy-ingress did not grow", a)
		}
	}
}
