//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// newVethPair creates a node netns and a pod netns joined by a veth
// (hostIf in the node, 10.99.0.1/24 and fd99::1/64; podIf in the pod,
// 10.99.0.2/24 and fd99::2/64), all deleted when tb ends.
func newVethPair(tb testing.TB, hostIf, podIfName string) (node, pod ns.NetNS) {
	tb.Helper()
	var err error
	for _, n := range []*ns.NetNS{&node, &pod} {
		if *n, err = nodesim.Create(nodesim.Name("lsdp")); err != nil {
			tb.Fatalf("create netns: %v", err)
		}
		nn := *n
		tb.Cleanup(func() {
			if err := nodesim.Delete(nn); err != nil {
				tb.Errorf("delete netns: %v", err)
			}
		})
	}
	err = node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: podIfName}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		peer, err := netlink.LinkByName(podIfName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(pod.Fd())); err != nil {
			return fmt.Errorf("move %s: %w", podIfName, err)
		}
		return upWithAddr(hostIf, "10.99.0.1/24", "fd99::1/64")
	})
	if err != nil {
		tb.Fatalf("set up node side: %v", err)
	}
	if err := pod.Do(func(ns.NetNS) error { return upWithAddr(podIfName, "10.99.0.2/24", "fd99::2/64") }); err != nil {
		tb.Fatalf("set up pod side: %v", err)
	}
	return node, pod
}

// upWithAddr gives ifname the addresses cidrs (IPv6 ones without
// duplicate address detection: usable at once) and sets it up.
func upWithAddr(ifname string, cidrs ...string) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	for _, cidr := range cidrs {
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return err
		}
		if a.IP.To4() == nil {
			a.Flags |= unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, a); err != nil {
			return fmt.Errorf("address %s: %w", ifname, err)
		}
	}
	return netlink.LinkSetUp(link)
}

// The remote end of the traffic tests: a host behind the node that is
// neither the node nor one of its pods, as another node or its pods are.
const (
	remoteV4 = "10.98.0.2"
	remoteV6 = "fd98::2"
)

// addRemote creates a third netns, remote, joined to node by a veth
// (nodeIf in the node, 10.98.0.1/24 and fd98::1/64; eth0 in remote,
// remoteV4/24 and remoteV6/64), makes node forward both families, and
// routes pod and remote through node (default routes via its addresses
// on their links; a nil pod keeps the routes it has). remote's packets
// reach the pod forwarded by the node, with the ifindex they arrived on,
// and are judged by the pod's ingress policy; the node's own packets never
// are. It is deleted when tb ends.
func addRemote(tb testing.TB, node, pod ns.NetNS, nodeIf, podIfName string) ns.NetNS {
	tb.Helper()
	remote, err := nodesim.Create(nodesim.Name("lsdp"))
	if err != nil {
		tb.Fatalf("create netns: %v", err)
	}
	tb.Cleanup(func() {
		if err := nodesim.Delete(remote); err != nil {
			tb.Errorf("delete netns: %v", err)
		}
	})
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := nodesim.Sysctl(node, key, "1"); err != nil {
			tb.Fatal(err)
		}
	}
	err = node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nodeIf}, PeerName: "eth0"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		peer, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(remote.Fd())); err != nil {
			return fmt.Errorf("move eth0: %w", err)
		}
		return upWithAddr(nodeIf, "10.98.0.1/24", "fd98::1/64")
	})
	if err != nil {
		tb.Fatalf("set up the node's link to remote: %v", err)
	}
	type side struct {
		n        ns.NetNS
		ifname   string
		addrs    []string
		gw4, gw6 string
	}
	sides := []side{{remote, "eth0", []string{remoteV4 + "/24", remoteV6 + "/64"}, "10.98.0.1", "fd98::1"}}
	if pod != nil {
		sides = append(sides, side{pod, podIfName, nil, "10.99.0.1", "fd99::1"})
	}
	for _, side := range sides {
		err := side.n.Do(func(ns.NetNS) error {
			if err := upWithAddr(side.ifname, side.addrs...); err != nil {
				return err
			}
			link, err := netlink.LinkByName(side.ifname)
			if err != nil {
				return err
			}
			for _, gw := range []string{side.gw4, side.gw6} {
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
					return fmt.Errorf("default route via %s: %w", gw, err)
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("route %s through the node: %v", side.ifname, err)
		}
	}
	return remote
}

// udpDelivered sends one datagram from a fresh socket in from to dst
// (listening in to) and reports whether it arrived.
func udpDelivered(tb testing.TB, from, to ns.NetNS, dst string) bool {
	tb.Helper()
	var conn net.PacketConn
	if err := to.Do(func(ns.NetNS) (err error) {
		conn, err = net.ListenPacket("udp4", dst)
		return err
	}); err != nil {
		tb.Fatalf("listen on %s: %v", dst, err)
	}
	defer conn.Close()
	if err := from.Do(func(ns.NetNS) error {
		c, err := net.Dial("udp4", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("lockstep"))
		return err
	}); err != nil {
		tb.Fatalf("send to %s: %v", dst, err)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 64)
	_, _, err := conn.ReadFrom(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err != nil {
		tb.Fatalf("receive on %s: %v", dst, err)
	}
	return true
}

func flushNeighbours(tb testing.TB, n ns.NetNS, ifname string) {
	tb.Helper()
	err := n.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, nb := range neighs {
			if err := netlink.NeighDel(&nb); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("flush neighbours of %s: %v", ifname, err)
	}
}

func vethPolicy(egressPort uint16) *policy.Desired {
	return &policy.Desired{
		Addrs: map[netipAddr]policy.AddrEntry{addr("10.99.0.2"): {Identity: 400, CIDRClass: policyapi.NoCIDRClass}},
		CIDRs: map[netipPrefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{"lsdp-h0": {
			IPv4: addr("10.99.0.2"), IngressIsolated: true, EgressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: policyapi.PeerWorld, Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}:  ports(egressPort, egressPort),
				{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}: ports(6000, 6000),
			},
		}},
	}
}

// Real traffic through a veth: policy blocks and allows both ways (the
// pod's ingress tested from a remote host the node routes, as the node's
// own packets are never blocked), a policy change takes effect for new
// flows, and Detach lifts enforcement.
func TestPrivilegedAttachVethTraffic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	node, pod := newVethPair(t, "lsdp-h0", "lsdp-p0")
	remote := addRemote(t, node, pod, "lsdp-r0", "lsdp-p0")
	attach := func() {
		if err := node.Do(func(ns.NetNS) error { return d.Attach("lsdp-h0") }); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	attach()
	attach() // idempotent: replaces, never duplicates
	var hostIndex uint32
	if err := node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("lsdp-h0")
		if err != nil {
			return err
		}
		hostIndex = uint32(link.Attrs().Index)
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			fs, err := netlink.FilterList(link, parent)
			if err != nil {
				return err
			}
			if len(fs) != 1 {
				return fmt.Errorf("%d filters on parent %x after two Attach, want 1", len(fs), parent)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Events name the interface from what Attach recorded.
	if name, ok := d.HostInterface(hostIndex); !ok || name != "lsdp-h0" {
		t.Errorf("HostInterface(%d) = %q, %v after Attach; want lsdp-h0", hostIndex, name, ok)
	}

	// Attached but no policy applied: fail closed.
	if udpDelivered(t, pod, node, "10.99.0.1:5000") {
		t.Error("traffic passed before any Apply")
	}
	// Fail closed dropped the pod's ARP request too: forget the
	// half-resolved neighbour instead of waiting out ARP's retransmit.
	flushNeighbours(t, pod, "lsdp-p0")
	mustApply(t, d, vethPolicy(5000))
	for _, tc := range []struct {
		name     string
		from, to ns.NetNS
		dst      string
		want     bool
	}{
		{"egress allowed port", pod, node, "10.99.0.1:5000", true},
		{"egress other port", pod, node, "10.99.0.1:5001", false},
		{"ingress allowed port", remote, pod, "10.99.0.2:6000", true},
		{"ingress other port", remote, pod, "10.99.0.2:6001", false},
		{"ingress other port from the node itself", node, pod, "10.99.0.2:6001", true},
	} {
		if got := udpDelivered(t, tc.from, tc.to, tc.dst); got != tc.want {
			t.Errorf("%s (%s): delivered=%v, want %v", tc.name, tc.dst, got, tc.want)
		}
	}

	mustApply(t, d, vethPolicy(5001))
	if !udpDelivered(t, pod, node, "10.99.0.1:5001") {
		t.Error("newly allowed port blocked after Apply")
	}
	if udpDelivered(t, pod, node, "10.99.0.1:5000") {
		t.Error("no longer allowed port still passes for a new flow")
	}

	if err := node.Do(func(ns.NetNS) error { return d.Detach("lsdp-h0") }); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := node.Do(func(ns.NetNS) error { return d.Detach("lsdp-h0") }); err != nil {
		t.Fatalf("second Detach: %v", err)
	}
	if name, ok := d.HostInterface(hostIndex); ok {
		t.Errorf("HostInterface(%d) = %q after Detach, want none", hostIndex, name)
	}
	if !udpDelivered(t, pod, node, "10.99.0.1:5002") {
		t.Error("traffic still blocked after Detach")
	}
}

// TestPrivilegedHostInterfaceLastAttachWins: when an interface vanished
// without a Detach and the kernel gave its ifindex to a new pod's, events
// at that ifindex name the new interface, also after the stale one is
// detached.
func TestPrivilegedHostInterfaceLastAttachWins(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach("lxc-gone", 4242)
	d.fakeAttach("lxc-new", 4242)
	if name, ok := d.HostInterface(4242); !ok || name != "lxc-new" {
		t.Errorf("HostInterface(4242) = %q, %v after the ifindex was reused, want lxc-new", name, ok)
	}
	if err := d.Detach("lxc-gone"); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if name, ok := d.HostInterface(4242); !ok || name != "lxc-new" {
		t.Errorf("HostInterface(4242) = %q, %v after the stale interface was detached, want lxc-new", name, ok)
	}
	if err := d.Detach("lxc-new"); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if name, ok := d.HostInterface(4242); ok {
		t.Errorf("HostInterface(4242) = %q after both were detached, want none", name)
	}
}

// TestPrivilegedAttachRewiredLink: another ADD of an attachment deletes the
// host link and makes a new one under the same name, and the enforcer
// attaches it again without a Detach in between. The new link gets the
// filters, and events name the new ifindex, never the old one.
func TestPrivilegedAttachRewiredLink(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	node, _ := newVethPair(t, "lsdp-h1", "lsdp-p1")
	attach := func() uint32 {
		t.Helper()
		var idx uint32
		err := node.Do(func(ns.NetNS) error {
			if err := d.Attach("lsdp-h1"); err != nil {
				return err
			}
			link, err := netlink.LinkByName("lsdp-h1")
			if err != nil {
				return err
			}
			idx = uint32(link.Attrs().Index)
			for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
				fs, err := netlink.FilterList(link, parent)
				if err != nil {
					return err
				}
				if len(fs) != 1 {
					return fmt.Errorf("%d filters on parent %x of ifindex %d, want 1", len(fs), parent, idx)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		return idx
	}
	old := attach()
	err := node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("lsdp-h1")
		if err != nil {
			return err
		}
		if err := netlink.LinkDel(link); err != nil {
			return err
		}
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lsdp-h1"}, PeerName: "lsdp-q1"})
	})
	if err != nil {
		t.Fatalf("make the link anew: %v", err)
	}
	renewed := attach()
	if renewed == old {
		t.Fatalf("the new link has the old ifindex %d", old)
	}
	if name, ok := d.HostInterface(renewed); !ok || name != "lsdp-h1" {
		t.Errorf("HostInterface(%d) = %q, %v for the new link, want lsdp-h1", renewed, name, ok)
	}
	if name, ok := d.HostInterface(old); ok {
		t.Errorf("HostInterface(%d) = %q for the deleted link, want none", old, name)
	}
}
