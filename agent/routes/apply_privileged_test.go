//go:build linux

package routes

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// nodeNS makes a throwaway namespace with a veth "uplink" holding
// 192.168.77.1/24 and fd00:77::1/64, as a node's link to its peers.
func nodeNS(t *testing.T) ns.NetNS {
	t.Helper()
	_, _ = nodesim.SweepStale("lsroutes")
	n, err := nodesim.Create(nodesim.Name("lsroutes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.Delete(n) })
	err = n.Do(func(ns.NetNS) error {
		link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink"}, PeerName: "uplink-peer"}
		if err := netlink.LinkAdd(link); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("uplink-peer")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		for _, a := range []string{"192.168.77.1/24", "fd00:77::1/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(link, addr); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(link)
	})
	if err != nil {
		t.Fatalf("set up node namespace: %v", err)
	}
	return n
}

// kernelRoutes lists the main table's routes to 10.0.0.0/8 and fd00:10::/32
// as "dst via gw proto N".
func kernelRoutes(t *testing.T, n ns.NetNS) []string {
	t.Helper()
	var out []string
	err := n.Do(func(ns.NetNS) error {
		list, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range list {
			if r.Dst == nil {
				continue
			}
			dst, _ := prefixOf(r.Dst)
			if !netip.MustParsePrefix("10.0.0.0/8").Overlaps(dst) && !netip.MustParsePrefix("fd00:10::/32").Overlaps(dst) {
				continue
			}
			out = append(out, dst.String()+" via "+r.Gw.String()+" proto "+r.Protocol.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func apply(t *testing.T, n ns.NetNS, desired []Route) Result {
	t.Helper()
	var res Result
	err := n.Do(func(ns.NetNS) error {
		var err error
		res, err = Apply(desired)
		return err
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func route(dst, via string) Route {
	return Route{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via), Node: "peer"}
}

// TestPrivilegedApplyOwnsOnlyItsRoutes programs routes to peers' blocks in
// a throwaway node namespace, changes and withdraws them, and never touches
// a route someone else put there, even for a destination lockstep wants.
func TestPrivilegedApplyOwnsOnlyItsRoutes(t *testing.T) {
	testenv.Privileged(t)
	n := nodeNS(t)
	// Someone else's routes: one in lockstep's way, one beside it.
	err := n.Do(func(ns.NetNS) error {
		for _, dst := range []string{"10.99.0.0/24", "10.244.9.0/26"} {
			_, ipnet, _ := net.ParseCIDR(dst)
			if err := netlink.RouteAdd(&netlink.Route{Dst: ipnet, Gw: net.ParseIP("192.168.77.254"), Protocol: unix.RTPROT_STATIC}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	foreign := []string{"10.244.9.0/26 via 192.168.77.254 proto static", "10.99.0.0/24 via 192.168.77.254 proto static"}

	steps := []struct {
		name          string
		desired       []Route
		want          []string
		wantConflicts int
	}{
		{
			name:    "add",
			desired: []Route{route("10.244.1.0/26", "192.168.77.2"), route("10.244.2.0/26", "192.168.77.3"), route("fd00:10:244:1::/120", "fd00:77::2")},
			want: []string{"10.244.1.0/26 via 192.168.77.2 proto 108", "10.244.2.0/26 via 192.168.77.3 proto 108",
				"fd00:10:244:1::/120 via fd00:77::2 proto 108"},
		},
		{
			name:    "same again changes nothing",
			desired: []Route{route("10.244.1.0/26", "192.168.77.2"), route("10.244.2.0/26", "192.168.77.3"), route("fd00:10:244:1::/120", "fd00:77::2")},
			want: []string{"10.244.1.0/26 via 192.168.77.2 proto 108", "10.244.2.0/26 via 192.168.77.3 proto 108",
				"fd00:10:244:1::/120 via fd00:77::2 proto 108"},
		},
		{
			name:    "a block moves to another node, one goes away, one conflicts",
			desired: []Route{route("10.244.1.0/26", "192.168.77.4"), route("10.244.9.0/26", "192.168.77.2")},
			want:    []string{"10.244.1.0/26 via 192.168.77.4 proto 108"}, wantConflicts: 1,
		},
		{name: "nothing desired", desired: nil, want: nil},
	}
	for i, step := range steps {
		res := apply(t, n, step.desired)
		if i == 1 && res.Changed() {
			t.Errorf("%s: changed %+v", step.name, res)
		}
		if len(res.Conflicts) != step.wantConflicts {
			t.Errorf("%s: conflicts %v, want %d", step.name, res.Conflicts, step.wantConflicts)
		}
		want := slices.Sorted(slices.Values(append(slices.Clone(foreign), step.want...)))
		if got := kernelRoutes(t, n); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: routes\n got %q\nwant %q", step.name, got, want)
		}
	}
}
