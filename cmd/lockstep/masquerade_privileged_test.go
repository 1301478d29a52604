//go:build linux

package main

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// inNode runs a command inside node and returns its output, failing the
// test if it fails.
func inNode(t *testing.T, node ns.NetNS, name string, args ...string) string {
	t.Helper()
	var out []byte
	err := node.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The outside network of the masquerade tests: no route back to the pods.
var (
	outsideNode = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("2001:db8:1::1/64")}
	outsideFar  = []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24"), netip.MustParsePrefix("2001:db8:1::2/64")}
)

// TestPrivilegedAgentMasquerades runs the real agent in a node namespace
// with a pod and an outside network that has no route back to the pods,
// and follows the masquerade rules through the agent's life: installed at
// start under the iptables dataplane and kept by the eBPF one (while the
// switch's clean-up removes the iptables policy chains of the same mode),
// moved when the node's iptables mode changes, and removed with
// --masquerade=false. The outside answers the pod, seeing the node's
// address, exactly while the rules are in place.
func TestPrivilegedAgentMasquerades(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{
		Pools: []string{"10.244.0.0/24", "fd00:10:244::/120"}, AgentArgs: []string{"--dataplane", "iptables"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outside := newPod(t)
	if err := nodesim.ConnectNetwork(node.NS, outside, nodesim.Network{NodeIf: "outside0", NodeAddrs: outsideNode, FarAddrs: outsideFar}); err != nil {
		t.Fatal(err)
	}
	for _, a := range outsideFar {
		stop, err := nodesim.ServeWhoAmI(outside, netip.AddrPortFrom(a.Addr(), 8080))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	pod := newPod(t)
	if _, err := node.Add(ctx, podRuntime("masq", pod)); err != nil {
		t.Fatal(err)
	}

	// reaches checks whether the pod reaches the outside in both families,
	// seen as the node's address.
	reaches := func(step string, want bool) {
		t.Helper()
		for i, far := range outsideFar {
			seen, err := nodesim.WhoAmI(pod, netip.AddrPortFrom(far.Addr(), 8080), time.Second)
			switch {
			case err != nil && !errors.Is(err, nodesim.ErrNoAnswer):
				t.Fatal(err)
			case want && seen != outsideNode[i].Addr():
				t.Errorf("%s: the outside at %s saw %v (%v), want the node's %s", step, far.Addr(), seen, err, outsideNode[i].Addr())
			case !want && err == nil:
				t.Errorf("%s: the outside at %s answered the pod (seeing %s), want no answer", step, far.Addr(), seen)
			}
		}
	}
	// holds reports whether mode's tables (both families) contain s.
	holds := func(mode, s string) bool {
		t.Helper()
		return strings.Contains(inNode(t, node.NS, "iptables-"+mode+"-save")+inNode(t, node.NS, "ip6tables-"+mode+"-save"), s)
	}
	restart := func(args ...string) {
		t.Helper()
		if err := node.StopAgent(); err != nil {
			t.Fatal(err)
		}
		node.Opts.AgentArgs = args
		if err := node.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	noPendingCleanups := func(step string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			st, err := api.NewClient(node.Socket, 2*time.Second).Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Dataplane.PendingCleanups) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: clean-ups still pending: %+v", step, st.Dataplane.PendingCleanups)
			}
		}
	}

	// 1. The iptables dataplane (nft: a fresh namespace has no hint).
	if !holds("nft", "-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE") || !holds("nft", "-A LOCKSTEP-MASQ -s fd00:10:244::/120 -j MASQUERADE") {
		t.Fatalf("no masquerade rules in iptables-nft:\n%s", inNode(t, node.NS, "iptables-nft-save", "-t", "nat"))
	}
	reaches("iptables dataplane", true)

	// 2. Switched to eBPF: the clean-up of iptables-nft removes the policy
	// chains and keeps the masquerade chain, which eBPF nodes use too.
	restart()
	noPendingCleanups("eBPF after iptables-nft")
	if holds("nft", "LOCKSTEP-FORWARD") || !holds("nft", "LOCKSTEP-MASQ") {
		t.Fatalf("after the switch to eBPF, iptables-nft holds:\n%s", inNode(t, node.NS, "iptables-nft-save"))
	}
	reaches("eBPF dataplane", true)

	// 3. The node's iptables moves to legacy: the rules move with it.
	inNode(t, node.NS, "iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
	restart()
	noPendingCleanups("eBPF on a legacy node")
	if holds("nft", "LOCKSTEP") || !holds("legacy", "-A LOCKSTEP-MASQ -s fd00:10:244::/120 -j MASQUERADE") {
		t.Fatalf("after the move to legacy:\nnft:\n%s\nlegacy:\n%s", inNode(t, node.NS, "iptables-nft-save"), inNode(t, node.NS, "iptables-legacy-save"))
	}
	reaches("eBPF dataplane, legacy iptables", true)

	// 4. --masquerade=false removes them.
	restart("--masquerade=false")
	if holds("nft", "LOCKSTEP") || holds("legacy", "LOCKSTEP") {
		t.Fatalf("--masquerade=false left rules:\nnft:\n%s\nlegacy:\n%s", inNode(t, node.NS, "iptables-nft-save"), inNode(t, node.NS, "iptables-legacy-save"))
	}
	reaches("--masquerade=false", false)
	if !holds("legacy", "KUBE-IPTABLES-HINT") {
		t.Error("a chain that is not lockstep's was removed")
	}
}
