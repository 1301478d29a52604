//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// TestPrivilegedHostilePoliciesLeaveOtherPodsAlone: one tenant's policies
// that lockstep cannot enforce, a CIDR netip rejects and more except
// prefixes than the node's prefix map holds in a policy that selects no
// pod, used to keep the agent from starting (and every CNI ADD of the node
// failing with it). Now, on both dataplanes, the agent starts, other pods'
// ADD, traffic and DEL work, the tenant's own pod fails closed (no
// connection reaches it; it still reaches out, its egress not being
// isolated), and lockstep status names both policies and that pod.
func TestPrivilegedHostilePoliciesLeaveOtherPodsAlone(t *testing.T) {
	dir := t.TempDir()
	var excepts strings.Builder
	for i := range 70000 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i << 4)}), 28)
		fmt.Fprintf(&excepts, "'%s', ", p)
	}
	manifest := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: hog, namespace: hostile}\nspec:\n" +
		"  podSelector: {matchLabels: {app: nobody}}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [" + excepts.String() + "]}}]}]\n" +
		"---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: cidr, namespace: hostile}\nspec:\n" +
		"  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 'fe80::/64%eth0'}}]}]\n" +
		"---\napiVersion: v1\nkind: Pod\nmetadata: {name: victim, namespace: hostile}\n"
	if err := os.WriteFile(filepath.Join(dir, "hostile.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dataplane := range []string{"ebpf", "iptables"} {
		t.Run(dataplane, func(t *testing.T) {
			node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}, Manifests: dir, AgentArgs: []string{"--dataplane", dataplane}})
			ctx := ctxT(t)
			podA, podB, podV := newPod(t), newPod(t), newPod(t)
			rtA, rtB := podRuntime("ctr-a", podA), podRuntime("ctr-b", podB)
			rtV := nodesim.Runtime("ctr-v", podV, "eth0", "hostile", "victim")
			resA, err := node.Add(ctx, rtA)
			if err != nil {
				t.Fatalf("ADD a: %v", err)
			}
			resB, err := node.Add(ctx, rtB)
			if err != nil {
				t.Fatalf("ADD b: %v", err)
			}
			resV, err := node.Add(ctx, rtV)
			if err != nil {
				t.Fatalf("ADD of the hostile tenant's pod: %v", err)
			}
			a4, _ := podAddrs(t, resA)
			b4, _ := podAddrs(t, resB)
			v4, _ := podAddrs(t, resV)
			if err := nodesim.Ping(podA, b4, 2*time.Second); err != nil {
				t.Errorf("ping a to b: %v", err)
			}
			// Into the victim first: its own ping out below is a tracked
			// connection whose replies pass.
			if err := nodesim.Ping(podA, v4, time.Second); err == nil {
				t.Errorf("ping a to the pod whose ingress fails closed: answered")
			}
			if err := nodesim.Ping(podV, a4, 2*time.Second); err != nil {
				t.Errorf("ping from the failed-closed pod (egress not isolated): %v", err)
			}
			st, err := api.NewClient(node.Socket, 0).Status(ctx)
			if err != nil || st.Dataplane == nil {
				t.Fatalf("status: %+v %v", st, err)
			}
			var names []string
			for _, f := range st.Dataplane.FailedPolicies {
				names = append(names, f.Policy)
			}
			eps := st.Dataplane.FailedEndpoints
			if !slices.Equal(names, []string{"hostile/cidr", "hostile/hog"}) || len(eps) != 1 || eps[0].HostIf != api.HostIfName("ctr-v", "eth0") ||
				!strings.Contains(eps[0].Ingress, "hostile/cidr") || eps[0].Egress != "" {
				t.Errorf("failing closed: policies %+v, endpoints %+v; want both hostile policies and the victim's ingress", st.Dataplane.FailedPolicies, eps)
			}
			for _, rt := range []*libcni.RuntimeConf{rtA, rtB, rtV} {
				if err := node.Del(ctx, rt); err != nil {
					t.Errorf("DEL %s: %v", rt.ContainerID, err)
				}
			}
		})
	}
}
