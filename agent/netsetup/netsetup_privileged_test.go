//go:build linux

package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// Addresses the node answers on, on a veth of its own, so pods can ping
// through their default route rather than only their gateway. (The test
// kernel has no dummy driver; veth and bridge are always built in.)
var (
	nodeV4 = netip.MustParseAddr("10.99.0.1")
	nodeV6 = netip.MustParseAddr("fd99::1")
)

const pingTimeout = 2 * time.Second

var sweepOnce sync.Once

// newNamespace creates a throwaway namespace deleted when t ends, however
// it ends.
func newNamespace(t testing.TB) ns.NetNS {
	t.Helper()
	sweepOnce.Do(func() {
		if n, err := nodesim.SweepStale("lstest"); err == nil && n > 0 {
			t.Logf("removed %d namespaces left by earlier runs", n)
		}
	})
	n, err := nodesim.Create(nodesim.Name("lstest"))
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(n); err != nil {
			t.Errorf("delete namespace: %v", err)
		}
	})
	return n
}

// newNode creates a node namespace with nodeV4 and nodeV6 on a link of its
// own.
func newNode(t testing.TB) ns.NetNS {
	t.Helper()
	node := newNamespace(t)
	err := node.Do(func(ns.NetNS) error {
		own := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "node0"}, PeerName: "node0peer"}
		if err := netlink.LinkAdd(own); err != nil {
			return err
		}
		for _, a := range []netip.Addr{nodeV4, nodeV6} {
			addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, a.BitLen())), Flags: unix.IFA_F_NODAD}
			if err := netlink.AddrAdd(own, addr); err != nil {
				return err
			}
		}
		peer, err := netlink.LinkByName("node0peer")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		return netlink.LinkSetUp(own)
	})
	if err != nil {
		t.Fatalf("set up node link: %v", err)
	}
	return node
}

// nsFile opens the handle on pod that the plugin passes the agent; it is
// closed when t ends.
func nsFile(t testing.TB, pod ns.NetNS) *os.File {
	t.Helper()
	f, err := os.Open(pod.Path())
	if err != nil {
		t.Fatalf("open pod netns: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// setupIn runs Setup inside node, as the plugin would run on that node.
func setupIn(t testing.TB, node ns.NetNS, args SetupArgs) (*Wired, time.Duration, error) {
	t.Helper()
	var wired *Wired
	var took time.Duration
	err := node.Do(func(ns.NetNS) error {
		start := time.Now()
		var err error
		wired, err = Setup(context.Background(), args)
		took = time.Since(start)
		return err
	})
	return wired, took, err
}

func checkIn(node ns.NetNS, args CheckArgs) error {
	return node.Do(func(ns.NetNS) error { return Check(context.Background(), args) })
}

func teardownIn(node ns.NetNS, hostIf string) error {
	return node.Do(func(ns.NetNS) error { return Teardown(hostIf) })
}

func hostLinksIn(t *testing.T, node ns.NetNS) []string {
	t.Helper()
	var names []string
	err := node.Do(func(ns.NetNS) error {
		var err error
		names, err = ListHostLinks()
		return err
	})
	if err != nil {
		t.Fatalf("ListHostLinks() error = %v", err)
	}
	return names
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func TestPrivilegedSetupCheckTeardown(t *testing.T) {
	testenv.Privileged(t)
	tests := []struct {
		name  string
		addrs []netip.Prefix
	}{
		{name: "IPv4 only", addrs: prefixes("10.244.0.5/24")},
		{name: "dual stack", addrs: prefixes("10.244.0.5/24", "fd00:10:244::5/64")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, pod := newNode(t), newNamespace(t)
			hostIf := api.HostIfName("container-1", "eth0")
			args := SetupArgs{Netns: nsFile(t, pod), HostIf: hostIf, PodIf: "eth0", MTU: 1450, Addresses: tt.addrs}

			wired, took, err := setupIn(t, node, args)
			if err != nil {
				t.Fatalf("Setup() error = %v", err)
			}
			t.Logf("Setup took %s", took)
			if wired.Host.Name != hostIf || wired.Host.MAC.String() != HostMAC.String() || wired.Host.Index == 0 {
				t.Fatalf("Setup() host = %+v, want %s with %s", wired.Host, hostIf, HostMAC)
			}
			if wired.Pod.Name != "eth0" || len(wired.Pod.MAC) != 6 {
				t.Fatalf("Setup() pod = %+v, want eth0 with a MAC", wired.Pod)
			}

			verifyHostSide(t, node, wired, 1450)
			verifyPodSide(t, pod, wired, 1450)

			for _, p := range tt.addrs {
				if err := nodesim.Ping(node, p.Addr(), pingTimeout); err != nil {
					t.Errorf("node cannot ping pod at %s: %v", p.Addr(), err)
				}
				nodeAddr := nodeV4
				if p.Addr().Is6() {
					nodeAddr = nodeV6
				}
				if err := nodesim.Ping(pod, nodeAddr, pingTimeout); err != nil {
					t.Errorf("pod cannot ping node at %s: %v", nodeAddr, err)
				}
			}
			if err := nodesim.Ping(pod, GatewayV4, pingTimeout); err != nil {
				t.Errorf("pod cannot ping its gateway %s: %v", GatewayV4, err)
			}

			check := CheckArgs{Netns: nsFile(t, pod), HostIf: hostIf, PodIf: "eth0", Addresses: tt.addrs}
			if err := checkIn(node, check); err != nil {
				t.Fatalf("Check() after Setup error = %v", err)
			}

			// Break the pod: remove its IPv4 address.
			err = pod.Do(func(ns.NetNS) error {
				link, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				return netlink.AddrDel(link, &netlink.Addr{IPNet: ipNet(wired.Addresses[0])})
			})
			if err != nil {
				t.Fatalf("delete pod address: %v", err)
			}
			err = checkIn(node, check)
			var mismatch *MismatchError
			if !errors.As(err, &mismatch) {
				t.Fatalf("Check() after deleting an address error = %v, want *MismatchError", err)
			}
			want := fmt.Sprintf("pod interface eth0 in %s lacks address 10.244.0.5/32", pod.Path())
			if !slices.Contains(mismatch.Diffs, want) {
				t.Fatalf("Check() = %q, want it to say %q", err, want)
			}
			t.Logf("Check reports: %v", err)

			for i := range 2 {
				if err := teardownIn(node, hostIf); err != nil {
					t.Fatalf("Teardown() #%d error = %v", i+1, err)
				}
			}
			if links := hostLinksIn(t, node); len(links) != 0 {
				t.Fatalf("host links after Teardown = %v, want none", links)
			}
			err = pod.Do(func(ns.NetNS) error {
				_, err := netlink.LinkByName("eth0")
				return err
			})
			if !isNotFound(err) {
				t.Fatalf("pod eth0 after Teardown: lookup error = %v, want not found", err)
			}
			err = checkIn(node, check)
			if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "host interface "+hostIf+" is missing") {
				t.Fatalf("Check() after Teardown = %v, want the host interface reported missing", err)
			}
		})
	}
}

func verifyHostSide(t *testing.T, node ns.NetNS, wired *Wired, mtu int) {
	t.Helper()
	_, v6 := families(wired.Addresses)
	err := node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(wired.Host.Name)
		if err != nil {
			return err
		}
		attrs := link.Attrs()
		if link.Type() != "veth" || attrs.MTU != mtu || attrs.Flags&net.FlagUp == 0 || attrs.HardwareAddr.String() != HostMAC.String() {
			return fmt.Errorf("host link is %s mtu %d flags %v mac %s, want an up veth, mtu %d, mac %s",
				link.Type(), attrs.MTU, attrs.Flags, attrs.HardwareAddr, mtu, HostMAC)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		var got []string
		for _, a := range addrs {
			got = append(got, a.IPNet.String())
		}
		if !slices.Contains(got, "169.254.1.1/32") || slices.Contains(got, "fe80::1/64") != v6 {
			return fmt.Errorf("host link addresses = %v, want 169.254.1.1/32 and, for dual stack, fe80::1/64", got)
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, p := range wired.Addresses {
			if !hasRouteTo(routes, p) {
				return fmt.Errorf("no host route to %s via %s in %v", p, wired.Host.Name, routes)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("host side: %v", err)
	}
}

func verifyPodSide(t *testing.T, pod ns.NetNS, wired *Wired, mtu int) {
	t.Helper()
	_, v6 := families(wired.Addresses)
	err := pod.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(wired.Pod.Name)
		if err != nil {
			return err
		}
		if link.Attrs().MTU != mtu || link.Attrs().HardwareAddr.String() != wired.Pod.MAC.String() {
			return fmt.Errorf("pod link mtu %d mac %s, want %d and %s", link.Attrs().MTU, link.Attrs().HardwareAddr, mtu, wired.Pod.MAC)
		}
		neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		gateways := []netip.Addr{GatewayV4}
		if v6 {
			gateways = append(gateways, GatewayV6)
		}
		for _, gw := range gateways {
			found := false
			for _, n := range neighs {
				if n.IP.Equal(gw.AsSlice()) && n.State == netlink.NUD_PERMANENT && n.HardwareAddr.String() == HostMAC.String() {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("no permanent neighbour %s -> %s in %v", gw, HostMAC, neighs)
			}
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, gw := range gateways {
			if !hasDefaultVia(routes, gw) {
				return fmt.Errorf("no default route via %s in %v", gw, routes)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod side: %v", err)
	}
}

// TestPrivilegedSetupRollsBackWhenPodIfTaken: the pod namespace already has
// an eth0, so the pair cannot be created and no host link may remain.
func TestPrivilegedSetupRollsBackWhenPodIfTaken(t *testing.T) {
	testenv.Privileged(t)
	node, pod := newNode(t), newNamespace(t)
	err := pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
	})
	if err != nil {
		t.Fatalf("add a bridge named eth0 to the pod: %v", err)
	}
	hostIf := api.HostIfName("container-taken", "eth0")
	_, _, err = setupIn(t, node, SetupArgs{Netns: nsFile(t, pod), HostIf: hostIf, PodIf: "eth0", Addresses: prefixes("10.244.0.7/24")})
	if !errors.Is(err, ErrPodIfExists) {
		t.Fatalf("Setup() error = %v, want ErrPodIfExists", err)
	}
	t.Logf("Setup reports: %v", err)
	if links := hostLinksIn(t, node); len(links) != 0 {
		t.Fatalf("host links after failed Setup = %v, want none", links)
	}
}

// TestPrivilegedSetupRollsBackWhenAddressRouted: a second pod handed an
// address the node already routes to the first must fail after its pair
// exists, delete its pair, and leave the first pod reachable.
func TestPrivilegedSetupRollsBackWhenAddressRouted(t *testing.T) {
	testenv.Privileged(t)
	node, pod1, pod2 := newNode(t), newNamespace(t), newNamespace(t)
	first := api.HostIfName("container-1", "eth0")
	if _, _, err := setupIn(t, node, SetupArgs{Netns: nsFile(t, pod1), HostIf: first, PodIf: "eth0", Addresses: prefixes("10.244.0.9/24")}); err != nil {
		t.Fatalf("Setup() first pod error = %v", err)
	}
	second := api.HostIfName("container-2", "eth0")
	_, _, err := setupIn(t, node, SetupArgs{Netns: nsFile(t, pod2), HostIf: second, PodIf: "eth0", Addresses: prefixes("10.244.0.9/24")})
	if !errors.Is(err, ErrRouteTaken) {
		t.Fatalf("Setup() second pod error = %v, want ErrRouteTaken", err)
	}
	t.Logf("Setup reports: %v", err)
	if links := hostLinksIn(t, node); !slices.Equal(links, []string{first}) {
		t.Fatalf("host links = %v, want only %s", links, first)
	}
	err = pod2.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName("eth0")
		return err
	})
	if !isNotFound(err) {
		t.Fatalf("second pod's eth0 survived the rollback (lookup error %v)", err)
	}
	if err := nodesim.Ping(node, netip.MustParseAddr("10.244.0.9"), pingTimeout); err != nil {
		t.Fatalf("first pod unreachable after the second rolled back: %v", err)
	}
}

// TestPrivilegedSetupRetriedAdd: a runtime that retries ADD finds the pair
// of the first attempt and must end with one working pair.
func TestPrivilegedSetupRetriedAdd(t *testing.T) {
	testenv.Privileged(t)
	node, pod := newNode(t), newNamespace(t)
	args := SetupArgs{Netns: nsFile(t, pod), HostIf: api.HostIfName("container-r", "eth0"), PodIf: "eth0", Addresses: prefixes("10.244.0.11/24", "fd00::11/64")}
	for attempt := 1; attempt <= 2; attempt++ {
		if _, _, err := setupIn(t, node, args); err != nil {
			t.Fatalf("Setup() attempt %d error = %v", attempt, err)
		}
	}
	if err := checkIn(node, CheckArgs{Netns: args.Netns, HostIf: args.HostIf, PodIf: args.PodIf, Addresses: args.Addresses}); err != nil {
		t.Fatalf("Check() after retried Setup error = %v", err)
	}
	if err := nodesim.Ping(node, netip.MustParseAddr("fd00::11"), pingTimeout); err != nil {
		t.Fatalf("pod unreachable after retried Setup: %v", err)
	}
}

// TestPrivilegedSharedGateways: every host end carries the same gateway
// addresses; two pods on one node must both work.
func TestPrivilegedSharedGateways(t *testing.T) {
	testenv.Privileged(t)
	node := newNode(t)
	var want []string
	for i := range 2 {
		pod := newNamespace(t)
		addrs := prefixes(fmt.Sprintf("10.244.1.%d/24", i+1), fmt.Sprintf("fd00:1::%d/64", i+1))
		hostIf := api.HostIfName(fmt.Sprintf("container-%d", i), "eth0")
		if _, _, err := setupIn(t, node, SetupArgs{Netns: nsFile(t, pod), HostIf: hostIf, PodIf: "eth0", Addresses: addrs}); err != nil {
			t.Fatalf("Setup() pod %d error = %v", i, err)
		}
		want = append(want, hostIf)
		for _, p := range addrs {
			if err := nodesim.Ping(node, p.Addr(), pingTimeout); err != nil {
				t.Fatalf("node cannot ping pod %d at %s: %v", i, p.Addr(), err)
			}
		}
		if err := nodesim.Ping(pod, nodeV6, pingTimeout); err != nil {
			t.Fatalf("pod %d cannot ping node at %s: %v", i, nodeV6, err)
		}
	}
	got := hostLinksIn(t, node)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListHostLinks() = %v, want %v", got, want)
	}
}

// TestPrivilegedListHostLinksFilters: only veths named like HostIfName
// count, and Teardown refuses to delete anything that is not a veth.
func TestPrivilegedListHostLinksFilters(t *testing.T) {
	testenv.Privileged(t)
	node := newNode(t)
	const lookalike = "ls0123456789ab"
	err := node.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: lookalike}}); err != nil {
			return err
		}
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lsnothex0000zz"}, PeerName: "peer0"})
	})
	if err != nil {
		t.Fatalf("add look-alike links: %v", err)
	}
	if links := hostLinksIn(t, node); len(links) != 0 {
		t.Fatalf("ListHostLinks() = %v, want none", links)
	}
	err = teardownIn(node, lookalike)
	if err == nil || !strings.Contains(err.Error(), "not a lockstep veth") {
		t.Fatalf("Teardown(%s) error = %v, want a refusal to delete a bridge", lookalike, err)
	}
}

// TestPrivilegedCheckReportsMissingNetns: CHECK after the runtime removed
// the pod's namespace says so rather than failing to read it.
func TestPrivilegedCheckReportsMissingNetns(t *testing.T) {
	testenv.Privileged(t)
	node := newNode(t)
	err := checkIn(node, CheckArgs{Netns: nil, HostIf: api.HostIfName("c", "eth0"), PodIf: "eth0", Addresses: prefixes("10.244.0.5/24")})
	var mismatch *MismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check() error = %v, want a mismatch naming the missing netns", err)
	}
}

// BenchmarkPrivilegedSetup measures Setup of one dual-stack pod on a node
// that already holds the pods of the earlier iterations; each pod's
// namespace is made before the clock runs.
func BenchmarkPrivilegedSetup(b *testing.B) {
	testenv.Privileged(b)
	node := newNode(b)
	pods := make([]*os.File, b.N)
	for i := range pods {
		pods[i] = nsFile(b, newNamespace(b))
	}
	b.ResetTimer()
	for i := range b.N {
		addrs := prefixes(fmt.Sprintf("10.244.%d.%d/16", 2+i/250, 1+i%250), fmt.Sprintf("fd00:2::%x/64", i+1))
		if _, _, err := setupIn(b, node, SetupArgs{Netns: pods[i], HostIf: api.HostIfName(fmt.Sprintf("bench-%d", i), "eth0"), PodIf: "eth0", Addresses: addrs}); err != nil {
			b.Fatalf("Setup() pod %d error = %v", i, err)
		}
	}
}

// TestPrivilegedSetupLeavesNoThreadInAPod: the agent wires pods from a
// long-lived process, so no thread of it may stay in a pod's namespace
// after Setup and Check, whichever thread they opened sockets from.
func TestPrivilegedSetupLeavesNoThreadInAPod(t *testing.T) {
	testenv.Privileged(t)
	node := newNode(t)
	pods := map[string]bool{} // "net:[inode]", as /proc shows a thread's
	for i := range 10 {
		pod := newNamespace(t)
		var st unix.Stat_t
		if err := unix.Stat(pod.Path(), &st); err != nil {
			t.Fatal(err)
		}
		pods[fmt.Sprintf("net:[%d]", st.Ino)] = true
		args := SetupArgs{Netns: nsFile(t, pod), HostIf: api.HostIfName(fmt.Sprintf("threads-%d", i), "eth0"), PodIf: "eth0", Addresses: prefixes(fmt.Sprintf("10.244.3.%d/24", i+1))}
		if _, _, err := setupIn(t, node, args); err != nil {
			t.Fatalf("Setup() pod %d error = %v", i, err)
		}
		if err := checkIn(node, CheckArgs{Netns: args.Netns, HostIf: args.HostIf, PodIf: "eth0", Addresses: args.Addresses}); err != nil {
			t.Fatalf("Check() pod %d error = %v", i, err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		// A thread may end between the listing and the read.
		if id, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && pods[id] {
			t.Errorf("thread %s stayed in pod network namespace %s", task.Name(), id)
		}
	}
}
