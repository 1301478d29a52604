//go:build linux

package iptables

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// The traffic topology: a node namespace routing between two pod
// namespaces the way the ptp plugin wires pods: each pod has a /32 (and a
// /128) on its eth0 and default routes via the node's gateway addresses,
// which every host-side veth carries as a /32 and a /128; the node routes
// each pod's addresses to its veth. A third namespace, remote, is a host
// behind the node (another node, or its pods): the node routes between it
// and the pods, so its packets cross FORWARD as any forwarded packet does.
const (
	trafficGateway  = "10.77.0.1"
	trafficGateway6 = "fd77::1"
	trafficClient   = "10.77.0.10" // pod a, host veth lsipt-a
	trafficClient6  = "fd77::10"
	trafficServer   = "10.77.0.11" // pod b, host veth lsipt-b
	trafficServer6  = "fd77::11"
	trafficRemote   = "10.78.0.2" // remote, behind the node's lsipt-r (10.78.0.1)
	trafficRemote6  = "fd78::2"   // (fd78::1)
)

type trafficNode struct {
	node, client, server, remote ns.NetNS
}

func newTrafficNode(t *testing.T) *trafficNode {
	t.Helper()
	tn := &trafficNode{node: newNetns(t), client: newNetns(t), server: newNetns(t), remote: newNetns(t)}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := nodesim.Sysctl(tn.node, key, "1"); err != nil {
			t.Fatal(err)
		}
	}
	tn.wirePod(t, tn.client, "lsipt-a", trafficClient, trafficClient6)
	tn.wirePod(t, tn.server, "lsipt-b", trafficServer, trafficServer6)
	tn.wireRemote(t)
	return tn
}

// hostAddr is a as a /32 or /128 that needs no duplicate address
// detection.
func hostAddr(a string) *netlink.Addr {
	ip := net.ParseIP(a)
	bits := 128
	if ip.To4() != nil {
		bits = 32
	}
	return &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, Flags: unix.IFA_F_NODAD}
}

// moveVeth creates a veth in the node, its peer moved into n as eth0, and
// returns the node's end.
func (tn *trafficNode) moveVeth(n ns.NetNS, hostIf string) (netlink.Link, error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: "eth0"}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("add veth: %w", err)
	}
	peer, err := netlink.LinkByName("eth0")
	if err != nil {
		return nil, err
	}
	if err := netlink.LinkSetNsFd(peer, int(n.Fd())); err != nil {
		return nil, err
	}
	return netlink.LinkByName(hostIf)
}

func (tn *trafficNode) wirePod(t *testing.T, pod ns.NetNS, hostIf string, podAddrs ...string) {
	t.Helper()
	gws := []string{trafficGateway, trafficGateway6}
	err := tn.node.Do(func(ns.NetNS) error {
		host, err := tn.moveVeth(pod, hostIf)
		if err != nil {
			return err
		}
		for _, gw := range gws {
			if err := netlink.AddrAdd(host, hostAddr(gw)); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(host); err != nil {
			return err
		}
		for _, a := range podAddrs {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Scope: netlink.SCOPE_LINK, Dst: hostAddr(a).IPNet}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wire %s on the node: %v", hostIf, err)
	}
	err = pod.Do(func(ns.NetNS) error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, a := range podAddrs {
			if err := netlink.AddrAdd(eth, hostAddr(a)); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		for _, gw := range gws {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK, Dst: hostAddr(gw).IPNet}); err != nil {
				return err
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wire the pod of %s: %v", hostIf, err)
	}
}

// wireRemote joins remote to the node by a plain routed link: 10.78.0.0/24
// and fd78::/64, remote's default routes via the node.
func (tn *trafficNode) wireRemote(t *testing.T) {
	t.Helper()
	err := tn.node.Do(func(ns.NetNS) error {
		host, err := tn.moveVeth(tn.remote, "lsipt-r")
		if err != nil {
			return err
		}
		for _, cidr := range []string{"10.78.0.1/24", "fd78::1/64"} {
			a, err := netlink.ParseAddr(cidr)
			if err != nil {
				return err
			}
			a.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(host, a); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(host)
	})
	if err != nil {
		t.Fatalf("wire remote on the node: %v", err)
	}
	err = tn.remote.Do(func(ns.NetNS) error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, cidr := range []string{trafficRemote + "/24", trafficRemote6 + "/64"} {
			a, err := netlink.ParseAddr(cidr)
			if err != nil {
				return err
			}
			a.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(eth, a); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		for _, gw := range []string{"10.78.0.1", "fd78::1"} {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wire remote: %v", err)
	}
}

// from names the namespace a probe sends from.
func (tn *trafficNode) from(name string) ns.NetNS {
	return map[string]ns.NetNS{"client": tn.client, "node": tn.node, "remote": tn.remote}[name]
}

// listen serves TCP on addr in n until t ends (see nodesim.ServeTCP).
func listen(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	l, err := nodesim.ServeTCP(n, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// connects reports whether a TCP connection from n to addr completes and
// reads the server's reply (so the reply direction passed too).
func connects(n ns.NetNS, addr string) bool {
	return nodesim.Connects(n, addr, 700*time.Millisecond)
}

// waitTopology waits until every probe connects, lockstep not yet in
// force: the links may still be coming up.
func waitTopology(t *testing.T, tn *trafficNode, from []string, addrs ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		up := true
		for _, f := range from {
			for _, a := range addrs {
				up = up && connects(tn.from(f), a)
			}
		}
		if up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the topology does not pass traffic without policy")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// trafficState: client a (identity 300) and server b (identity 400). The
// server's ingress allows TCP 8080 from a (and from the world when
// world is set); its egress is isolated with no rule, so its replies pass
// only as replies. The client's egress allows TCP 8080 and 9090 to b.
func trafficState(world bool) *policy.Desired {
	server := &policy.EndpointPolicy{
		IPv4: addr(trafficServer), IPv6: addr(trafficServer6), IngressIsolated: true, EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(8080, 8080)},
	}
	if world {
		server.Rules[policy.RuleKey{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = ports(8080, 8080)
	}
	return &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr(trafficClient):  {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			addr(trafficClient6): {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			addr(trafficServer):  {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
			addr(trafficServer6): {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{
			"lsipt-a": {IPv4: addr(trafficClient), IPv6: addr(trafficClient6), EgressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: 400, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}: ports(8080, 8080, 9090, 9090),
			}},
			"lsipt-b": server,
		},
	}
}

// TestPrivilegedTrafficAllowedAndDenied sends real TCP connections
// through the node's FORWARD chain with each mode's rules in force: what
// the policy allows connects (and its replies come back through an
// isolated egress), what it does not is dropped, a remote host behind
// the node is the world, the node itself is never blocked (OUTPUT is not
// lockstep's), and Purge lifts everything.
func TestPrivilegedTrafficAllowedAndDenied(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			tn := newTrafficNode(t)
			listen(t, tn.server, trafficServer+":8080")
			listen(t, tn.server, trafficServer+":9090")
			allowed, denied := trafficServer+":8080", trafficServer+":9090"
			waitTopology(t, tn, []string{"client", "node", "remote"}, allowed, denied)
			r := nsRunner{tn.node}
			d, err := New(Options{Mode: m, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			type probe struct {
				from    string // "client", "node" or "remote"
				dst     string
				connect bool
			}
			for _, step := range []struct {
				world  bool
				probes []probe
			}{
				{false, []probe{{"client", allowed, true}, {"client", denied, false}, {"remote", allowed, false}, {"node", allowed, true}, {"node", denied, true}}},
				{true, []probe{{"client", allowed, true}, {"client", denied, false}, {"remote", allowed, true}, {"remote", denied, false}, {"node", denied, true}}},
			} {
				want := trafficState(step.world)
				attachAll(t, d, want)
				mustApply(t, d, want)
				for _, p := range step.probes {
					got := connects(tn.from(p.from), p.dst)
					for try := 0; !got && p.connect && try < 3; try++ {
						got = connects(tn.from(p.from), p.dst) // a loaded machine, not the policy
					}
					if got != p.connect {
						t.Errorf("world=%v: %s to %s connects=%v, want %v", step.world, p.from, p.dst, got, p.connect)
					}
				}
			}
			if _, err := Purge(context.Background(), r, m); err != nil {
				t.Fatal(err)
			}
			if !connects(tn.client, denied) {
				t.Error("traffic still blocked after Purge")
			}
		})
	}
}

// TestPrivilegedNodeToPodTraffic: under default-deny ingress, and an
// egress isolated with no rule, a TCP connection from the node itself to
// the pod completes in both families (the pod's replies pass its egress
// chain as ESTABLISHED), and the same connection from a remote host the
// node routes is dropped: the eBPF dataplane's answers.
func TestPrivilegedNodeToPodTraffic(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			tn := newTrafficNode(t)
			servers := []string{trafficServer + ":8080", "[" + trafficServer6 + "]:8080"}
			for _, a := range servers {
				listen(t, tn.server, a)
			}
			waitTopology(t, tn, []string{"node", "remote"}, servers...)
			d, err := New(Options{Mode: m, Runner: nsRunner{tn.node}})
			if err != nil {
				t.Fatal(err)
			}
			want := trafficState(false)
			want.Endpoints["lsipt-b"].Rules = nil // default deny
			attachAll(t, d, want)
			mustApply(t, d, want)
			for _, a := range servers {
				if !connects(tn.node, a) && !connects(tn.node, a) {
					t.Errorf("node to %s: no connection, want one (a pod never blocks its node)", a)
				}
				if connects(tn.remote, a) {
					t.Errorf("remote to %s: connected through default-deny ingress", a)
				}
			}
		})
	}
}
