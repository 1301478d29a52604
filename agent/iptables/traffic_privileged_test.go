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

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/internal/nodesim"
)

// The traffic topology: a node namespace routing between two pod
// namespaces the way the ptp plugin wires pods: each pod has a /32 on its
// eth0 and a default route via the node's gateway address, which every
// host-side veth carries as a /32; the node routes each pod's /32 to its
// veth.
const (
	trafficGateway = "10.77.0.1"
	trafficClient  = "10.77.0.10" // pod a, host veth lsipt-a
	trafficServer  = "10.77.0.11" // pod b, host veth lsipt-b
)

type trafficNode struct {
	node, client, server ns.NetNS
}

func newTrafficNode(t *testing.T) *trafficNode {
	t.Helper()
	tn := &trafficNode{node: newNetns(t), client: newNetns(t), server: newNetns(t)}
	for _, n := range []ns.NetNS{tn.node, tn.client, tn.server} {
		if err := nodesim.Sysctl(n, "net/ipv6/conf/all/disable_ipv6", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodesim.Sysctl(tn.node, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	tn.wirePod(t, tn.client, "lsipt-a", trafficClient)
	tn.wirePod(t, tn.server, "lsipt-b", trafficServer)
	return tn
}

func (tn *trafficNode) wirePod(t *testing.T, pod ns.NetNS, hostIf, podAddr string) {
	t.Helper()
	gw := net.ParseIP(trafficGateway)
	err := tn.node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: "eth0"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		peer, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(pod.Fd())); err != nil {
			return err
		}
		host, err := netlink.LinkByName(hostIf)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(host); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Scope: netlink.SCOPE_LINK,
			Dst: &net.IPNet{IP: net.ParseIP(podAddr), Mask: net.CIDRMask(32, 32)}})
	})
	if err != nil {
		t.Fatalf("wire %s on the node: %v", hostIf, err)
	}
	err = pod.Do(func(ns.NetNS) error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(podAddr), Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK,
			Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw})
	})
	if err != nil {
		t.Fatalf("wire the pod of %s: %v", hostIf, err)
	}
}

// listen serves TCP on addr in n (accepting and closing) until t ends.
func listen(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	var l net.Listener
	if err := n.Do(func(ns.NetNS) (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
}

// connects reports whether a TCP connection from n to addr completes and
// reads the server's reply (so the reply direction passed too).
func connects(n ns.NetNS, addr string) bool {
	ok := false
	_ = n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", addr, 700*time.Millisecond)
		if err != nil {
			return nil
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
		buf := make([]byte, 2)
		_, err = c.Read(buf)
		ok = err == nil && string(buf) == "ok"
		return nil
	})
	return ok
}

// trafficState: client a (identity 300) and server b (identity 400). The
// server's ingress allows TCP 8080 from a (and from the world when
// world is set); its egress is isolated with no rule, so its replies pass
// only as replies. The client's egress allows TCP 8080 and 9090 to b.
func trafficState(world bool) *policy.Desired {
	server := &policy.EndpointPolicy{
		IPv4: addr(trafficServer), IngressIsolated: true, EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{{Peer: 300, Dir: policy.Ingress, Proto: policy.ProtoTCP}: ports(8080, 8080)},
	}
	if world {
		server.Rules[policy.RuleKey{Peer: policy.PeerWorld, Dir: policy.Ingress, Proto: policy.ProtoTCP}] = ports(8080, 8080)
	}
	return &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr(trafficClient): {Identity: 300, CIDRClass: policy.NoCIDRClass},
			addr(trafficServer): {Identity: 400, CIDRClass: policy.NoCIDRClass},
		},
		CIDRs: map[netip.Prefix]policy.Peer{prefix("0.0.0.0/0"): policy.NoCIDRClass, prefix("::/0"): policy.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{
			"lsipt-a": {IPv4: addr(trafficClient), EgressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: 400, Dir: policy.Egress, Proto: policy.ProtoTCP}: ports(8080, 8080, 9090, 9090),
			}},
			"lsipt-b": server,
		},
	}
}

// TestPrivilegedTrafficAllowedAndDenied sends real TCP connections
// through the node's FORWARD and OUTPUT chains with each mode's rules in
// force: what the policy allows connects (and its replies come back
// through an isolated egress), what it does not is dropped, node-to-pod
// traffic is the world, and Purge lifts everything.
func TestPrivilegedTrafficAllowedAndDenied(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			tn := newTrafficNode(t)
			listen(t, tn.server, trafficServer+":8080")
			listen(t, tn.server, trafficServer+":9090")
			allowed, denied := trafficServer+":8080", trafficServer+":9090"
			deadline := time.Now().Add(10 * time.Second)
			for !connects(tn.client, allowed) || !connects(tn.client, denied) || !connects(tn.node, denied) {
				if time.Now().After(deadline) {
					t.Fatal("the topology does not pass traffic without policy")
				}
				time.Sleep(100 * time.Millisecond) // links still coming up
			}
			r := nsRunner{tn.node}
			d, err := New(Options{Mode: m, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			type probe struct {
				from    string // "client" or "node"
				dst     string
				connect bool
			}
			for _, step := range []struct {
				world  bool
				probes []probe
			}{
				{false, []probe{{"client", allowed, true}, {"client", denied, false}, {"node", allowed, false}}},
				{true, []probe{{"client", allowed, true}, {"client", denied, false}, {"node", allowed, true}, {"node", denied, false}}},
			} {
				want := trafficState(step.world)
				attachAll(t, d, want)
				mustApply(t, d, want)
				for _, p := range step.probes {
					from := tn.client
					if p.from == "node" {
						from = tn.node
					}
					got := connects(from, p.dst)
					for try := 0; !got && p.connect && try < 3; try++ {
						got = connects(from, p.dst) // a loaded machine, not the policy
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
