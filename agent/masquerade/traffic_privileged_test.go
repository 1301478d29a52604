//go:build linux

package masquerade

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/netsetup"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// nsPrefix names the throwaway namespaces of these tests.
const nsPrefix = "lsmasq"

var sweepOnce sync.Once

func newNetns(t *testing.T) ns.NetNS {
	t.Helper()
	sweepOnce.Do(func() { _, _ = nodesim.SweepStale(nsPrefix) })
	n, err := nodesim.Create(nodesim.Name(nsPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(n); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	return n
}

// nsRunner runs every command inside the node namespace: the child is
// forked from a thread ns.Do moved into it.
type nsRunner struct {
	ns ns.NetNS
	// restores counts iptables-restore runs.
	mu       sync.Mutex
	restores int
}

func (r *nsRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	if strings.HasSuffix(name, "-restore") {
		r.mu.Lock()
		r.restores++
		r.mu.Unlock()
	}
	var out []byte
	var runErr error
	if err := r.ns.Do(func(ns.NetNS) error {
		out, runErr = iptables.ExecRunner{}.Run(ctx, name, args, stdin)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, runErr
}

func (r *nsRunner) takeRestores() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.restores
	r.restores = 0
	return n
}

// wirePod wires pod to node exactly as lockstep-cni does (agent/netsetup): a
// veth named hostIf on the node, eth0 in the pod with addrs as /32 and
// /128, the link-local gateways and the node's host routes.
func wirePod(node, pod ns.NetNS, hostIf string, addrs ...netip.Prefix) error {
	podNS, err := os.Open(pod.Path())
	if err != nil {
		return err
	}
	defer podNS.Close()
	return node.Do(func(ns.NetNS) error {
		_, err := netsetup.Setup(context.Background(), netsetup.SetupArgs{Netns: podNS, HostIf: hostIf, PodIf: "eth0", Addresses: addrs})
		return err
	})
}

// The topology: a node routing for two pods (wired as lockstep-cni wires
// them) and two networks: "outside", with an address outside the pools
// and no route back to the pod CIDRs (the internet), and "routed", which
// routes the pod CIDRs back through the node (a data-centre network, the
// non-masquerade list's use).
var (
	podA  = []netip.Prefix{netip.MustParsePrefix("10.244.1.2/32"), netip.MustParsePrefix("fd00:10:244:1::2/128")}
	podB  = []netip.Prefix{netip.MustParsePrefix("10.244.1.3/32"), netip.MustParsePrefix("fd00:10:244:1::3/128")}
	pools = prefixes("10.244.1.0/24", "fd00:10:244:1::/64")

	outsideNode = prefixes("192.0.2.1/24", "2001:db8:1::1/64")
	outsideFar  = prefixes("192.0.2.2/24", "2001:db8:1::2/64")
	routedNode  = prefixes("198.51.100.1/24", "2001:db8:2::1/64")
	routedFar   = prefixes("198.51.100.2/24", "2001:db8:2::2/64")
)

type topology struct {
	node, podA, podB, outside, routed ns.NetNS
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{node: newNetns(t), podA: newNetns(t), podB: newNetns(t), outside: newNetns(t), routed: newNetns(t)}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := nodesim.Sysctl(tp.node, key, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := wirePod(tp.node, tp.podA, "lsmasqa", podA...); err != nil {
		t.Fatal(err)
	}
	if err := wirePod(tp.node, tp.podB, "lsmasqb", podB...); err != nil {
		t.Fatal(err)
	}
	if err := nodesim.ConnectNetwork(tp.node, tp.outside, nodesim.Network{NodeIf: "outside0", NodeAddrs: outsideNode, FarAddrs: outsideFar}); err != nil {
		t.Fatal(err)
	}
	err := nodesim.ConnectNetwork(tp.node, tp.routed, nodesim.Network{NodeIf: "routed0", NodeAddrs: routedNode, FarAddrs: routedFar,
		RoutesBack: prefixes("10.244.0.0/16", "fd00:10:244::/48")})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// serve runs a who-am-I server on every address in n until the test ends.
func serve(t *testing.T, n ns.NetNS, addrs ...netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		stop, err := nodesim.ServeWhoAmI(n, netip.AddrPortFrom(a, 8080))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
}

func requireTools(t *testing.T) {
	t.Helper()
	testenv.Privileged(t)
	for _, tool := range []string{"iptables-legacy-restore", "iptables-nft-restore", "ip6tables-legacy-restore", "ip6tables-nft-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed: %v (make deps installs iptables)", tool, err)
		}
	}
}

// TestPrivilegedMasqueradeTraffic proves the rules with real packets, in
// both iptables modes and both families: a pod reaches a network with no
// route back to the pod CIDRs only once the node masquerades, and that
// network sees the node's address; a pod on the node and a network in the
// non-masquerade list see the pod's own address; and removing the rules
// cuts the outside off again.
func TestPrivilegedMasqueradeTraffic(t *testing.T) {
	requireTools(t)
	for _, mode := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
		t.Run(mode.String(), func(t *testing.T) {
			tp := newTopology(t)
			r := &nsRunner{ns: tp.node}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for fam := range 2 {
				serve(t, tp.outside, outsideFar[fam].Addr())
				serve(t, tp.routed, routedFar[fam].Addr())
				serve(t, tp.podB, podB[fam].Addr())
			}
			// seen asks each family's server at far what address podA
			// came from.
			seen := func(far []netip.Prefix) [2]netip.Addr {
				t.Helper()
				var out [2]netip.Addr
				for fam := range 2 {
					a, err := nodesim.WhoAmI(tp.podA, netip.AddrPortFrom(far[fam].Addr(), 8080), time.Second)
					if err != nil && !errors.Is(err, nodesim.ErrNoAnswer) {
						t.Fatal(err)
					}
					out[fam] = a
				}
				return out
			}
			// want checks what each family's server saw; no address
			// wanted means no answer wanted.
			want := func(what string, got [2]netip.Addr, want ...netip.Addr) {
				t.Helper()
				for fam := range 2 {
					var w netip.Addr
					if len(want) > 0 {
						w = want[fam]
					}
					switch {
					case got[fam] == w:
					case !w.IsValid():
						t.Errorf("%s (%s): answered, seeing %v; want no answer", what, iptables.Family(4+2*fam), got[fam])
					case !got[fam].IsValid():
						t.Errorf("%s (%s): no answer; want the server to see %v", what, iptables.Family(4+2*fam), w)
					default:
						t.Errorf("%s (%s): server saw %v, want %v", what, iptables.Family(4+2*fam), got[fam], w)
					}
				}
			}
			addrs := func(ps []netip.Prefix) []netip.Addr { return []netip.Addr{ps[0].Addr(), ps[1].Addr()} }

			want("outside, no masquerade rules", seen(outsideFar))
			want("routed network, no masquerade rules", seen(routedFar), addrs(podA)...)

			cfg := Config{Sources: pools, Cluster: pools, NonMasquerade: prefixes("198.51.100.0/24", "2001:db8:2::/64")}
			if _, err := Sync(ctx, r, mode, cfg); err != nil {
				t.Fatal(err)
			}
			want("outside, masqueraded", seen(outsideFar), addrs(outsideNode)...)
			want("pod on the node", seen(podB), addrs(podA)...)
			want("routed network in the non-masquerade list", seen(routedFar), addrs(podA)...)
			r.takeRestores()
			if ch, err := Sync(ctx, r, mode, cfg); err != nil || len(ch) > 0 || r.takeRestores() > 0 {
				t.Errorf("second Sync with the real tools: %v, %v; want no write (does iptables-save print the rules as Rules renders them?)", ch, err)
			}
			if other := otherMode(mode); strings.Contains(saveAll(t, r, other), ChainName) {
				t.Errorf("%s holds the masquerade chain after a Sync in %s", other, mode)
			}

			cfg.NonMasquerade = nil
			if _, err := Sync(ctx, r, mode, cfg); err != nil {
				t.Fatal(err)
			}
			want("routed network, no longer in the list", seen(routedFar), addrs(routedNode)...)

			if ch, err := Remove(ctx, r, mode); err != nil || len(ch) != 2 {
				t.Fatalf("Remove: %v, %v", ch, err)
			}
			want("outside after Remove", seen(outsideFar))
			if out := saveAll(t, r, mode); strings.Contains(out, ChainName) {
				t.Errorf("%s after Remove:\n%s", mode, out)
			}
		})
	}
}

func otherMode(m iptables.Mode) iptables.Mode {
	if m == iptables.ModeNFT {
		return iptables.ModeLegacy
	}
	return iptables.ModeNFT
}

// saveAll is every table of both families of mode m.
func saveAll(t *testing.T, r iptables.Runner, m iptables.Mode) string {
	t.Helper()
	var b strings.Builder
	for _, f := range families {
		out, err := r.Run(context.Background(), m.SaveTool(f), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
	}
	return b.String()
}
