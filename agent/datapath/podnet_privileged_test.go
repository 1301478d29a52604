//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/probe/nodesim"
)

// podNode is a node namespace whose pods are wired as lockstep's CNI
// wires them: each pod's eth0 has a /32 and a /128, routes by default via
// 169.254.1.1 and fe80::1 (the host veth's addresses), and the node routes
// each pod address to its host veth. No kube-proxy runs: a ClusterIP is
// reachable only as lockstep translates it.
type podNode struct {
	node ns.NetNS
	d    *Datapath
}

// podNet is one pod of a podNode.
type podNet struct {
	ns     ns.NetNS
	hostIf string
	v4, v6 string
}

func newPodNode(t *testing.T) *podNode {
	t.Helper()
	node, err := nodesim.Create(nodesim.Name("lssv"))
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(node); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := nodesim.Sysctl(node, key, "1"); err != nil {
			t.Fatal(err)
		}
	}
	return &podNode{node: node, d: newTestDatapath(t)}
}

// addPod creates a pod with addresses v4 and v6 behind host veth hostIf,
// and attaches the programs to hostIf when attach is set.
func (n *podNode) addPod(t *testing.T, hostIf, v4, v6 string, attach bool) podNet {
	t.Helper()
	pod, err := nodesim.Create(nodesim.Name("lssv"))
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(pod); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	peer := hostIf + "p"
	err = n.node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: peer}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		p, err := netlink.LinkByName(peer)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(p, int(pod.Fd())); err != nil {
			return fmt.Errorf("move %s: %w", peer, err)
		}
		if err := upWithAddr(hostIf, "169.254.1.1/32", "fe80::1/64"); err != nil {
			return err
		}
		host, err := netlink.LinkByName(hostIf)
		if err != nil {
			return err
		}
		for _, a := range []string{v4 + "/32", v6 + "/128"} {
			_, dst, _ := net.ParseCIDR(a)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
				return fmt.Errorf("route %s: %w", a, err)
			}
		}
		if attach {
			return n.d.Attach(hostIf)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wire %s on the node: %v", hostIf, err)
	}
	err = pod.Do(func(ns.NetNS) error {
		if err := upWithAddr(peer, v4+"/32", v6+"/128"); err != nil {
			return err
		}
		link, err := netlink.LinkByName(peer)
		if err != nil {
			return err
		}
		idx := link.Attrs().Index
		_, gw4, _ := net.ParseCIDR("169.254.1.1/32")
		for _, r := range []*netlink.Route{
			{LinkIndex: idx, Dst: gw4, Scope: netlink.SCOPE_LINK},
			{LinkIndex: idx, Gw: net.ParseIP("169.254.1.1")},
			{LinkIndex: idx, Gw: net.ParseIP("fe80::1")},
		} {
			if err := netlink.RouteAdd(r); err != nil {
				return fmt.Errorf("route %v: %w", r, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wire pod %s: %v", v4, err)
	}
	return podNet{ns: pod, hostIf: hostIf, v4: v4, v6: v6}
}

// serveWhoAmI answers, on TCP and UDP addr (host:port) in n, every
// connection and datagram with the address it came from.
func serveWhoAmI(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	l, pc := listenTCPUDP(t, n, addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(c.RemoteAddr().String()))
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(from.String()), from)
		}
	}()
}

// listenTCPUDP listens in n on TCP and UDP addr (host:port) until the test
// ends.
func listenTCPUDP(t *testing.T, n ns.NetNS, addr string) (net.Listener, net.PacketConn) {
	t.Helper()
	var l net.Listener
	var pc net.PacketConn
	err := n.Do(func(ns.NetNS) (err error) {
		if l, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close(); pc.Close() })
	return l, pc
}

// askTCP connects from n to addr and returns what the server says.
func askTCP(n ns.NetNS, addr string, timeout time.Duration) (string, error) {
	var reply string
	err := n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 128)
		k, err := c.Read(buf)
		if err != nil {
			return err
		}
		reply = string(buf[:k])
		return nil
	})
	return reply, err
}

// askUDP sends a datagram from n to addr on a connected socket and
// returns the answer. A refusal (ICMP port unreachable) is an error
// wrapping syscall.ECONNREFUSED.
func askUDP(n ns.NetNS, addr string, timeout time.Duration) (string, error) {
	var reply string
	err := n.Do(func(ns.NetNS) error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("who am i")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 128)
		k, err := c.Read(buf)
		if err != nil {
			return err
		}
		reply = string(buf[:k])
		return nil
	})
	return reply, err
}

// waitFor retries ask until it succeeds or timeout passes (fresh links
// resolve their neighbours first), and returns its last result.
func waitFor(ask func() (string, error), timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		reply, err := ask()
		if err == nil || time.Now().After(deadline) {
			return reply, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errTimeout reports whether err is a timeout.
func errTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
