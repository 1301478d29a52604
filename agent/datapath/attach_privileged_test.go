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

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/internal/nodesim"
	"lockstep.dev/lockstep/internal/testenv"
)

// newVethPair creates a node netns and a pod netns joined by a veth
// (hostIf in the node, 10.99.0.1/24; podIf in the pod, 10.99.0.2/24), all
// deleted when tb ends.
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
		return upWithAddr(hostIf, "10.99.0.1/24")
	})
	if err != nil {
		tb.Fatalf("set up node side: %v", err)
	}
	if err := pod.Do(func(ns.NetNS) error { return upWithAddr(podIfName, "10.99.0.2/24") }); err != nil {
		tb.Fatalf("set up pod side: %v", err)
	}
	return node, pod
}

func upWithAddr(ifname, cidr string) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("address %s: %w", ifname, err)
	}
	return netlink.LinkSetUp(link)
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
		Addrs: map[netipAddr]policy.AddrEntry{addr("10.99.0.2"): {Identity: 400, CIDRClass: policy.NoCIDRClass}},
		CIDRs: map[netipPrefix]policy.Peer{prefix("0.0.0.0/0"): policy.NoCIDRClass, prefix("::/0"): policy.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{"lsdp-h0": {
			IPv4: addr("10.99.0.2"), IngressIsolated: true, EgressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: policy.PeerWorld, Dir: policy.Egress, Proto: policy.ProtoUDP}:  ports(egressPort, egressPort),
				{Peer: policy.PeerWorld, Dir: policy.Ingress, Proto: policy.ProtoUDP}: ports(6000, 6000),
			},
		}},
	}
}

// Real traffic through a veth: policy blocks and allows both ways, a
// policy change takes effect for new flows, and Detach lifts enforcement.
func TestPrivilegedAttachVethTraffic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	node, pod := newVethPair(t, "lsdp-h0", "lsdp-p0")
	attach := func() {
		if err := node.Do(func(ns.NetNS) error { return d.Attach("lsdp-h0") }); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	attach()
	attach() // idempotent: replaces, never duplicates
	if err := node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("lsdp-h0")
		if err != nil {
			return err
		}
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
		{"ingress allowed port", node, pod, "10.99.0.2:6000", true},
		{"ingress other port", node, pod, "10.99.0.2:6001", false},
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
	if !udpDelivered(t, pod, node, "10.99.0.1:5002") {
		t.Error("traffic still blocked after Detach")
	}
}
