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

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/internal/nodesim"
)

// TestPrivilegedHostilePoliciesLeaveOtherPodsAlone: one tenant's policies
// that lockstep cannot enforce, a CIDR netip rejects and more except
// prefixes than the node's prefix map holds in a policy that selects no
// pod, used to keep the agent from starting (and every CNI ADD of the node
// failing with it). Now the agent starts, other pods' ADD, traffic and
// DEL work, and lockstep status names both policies.
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
		"  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 'fe80::/64%eth0'}}]}]\n"
	if err := os.WriteFile(filepath.Join(dir, "hostile.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}, Manifests: dir})
	ctx := ctxT(t)
	podA, podB := newPod(t), newPod(t)
	rtA, rtB := podRuntime("ctr-a", podA), podRuntime("ctr-b", podB)
	if _, err := node.Add(ctx, rtA); err != nil {
		t.Fatalf("ADD a: %v", err)
	}
	resB, err := node.Add(ctx, rtB)
	if err != nil {
		t.Fatalf("ADD b: %v", err)
	}
	b4, _ := podAddrs(t, resB)
	if err := nodesim.Ping(podA, b4, 2*time.Second); err != nil {
		t.Errorf("ping a to b: %v", err)
	}
	st, err := api.NewClient(node.Socket, 0).Status(ctx)
	if err != nil || st.Dataplane == nil {
		t.Fatalf("status: %+v %v", st, err)
	}
	var names []string
	for _, f := range st.Dataplane.FailedPolicies {
		names = append(names, f.Policy)
	}
	if !slices.Equal(names, []string{"hostile/cidr", "hostile/hog"}) || len(st.Dataplane.FailedEndpoints) != 0 {
		t.Errorf("failing closed: policies %+v, endpoints %+v; want both hostile policies and no endpoint (none of theirs is here)",
			st.Dataplane.FailedPolicies, st.Dataplane.FailedEndpoints)
	}
	if err := node.Del(ctx, rtA); err != nil {
		t.Errorf("DEL a: %v", err)
	}
	if err := node.Del(ctx, rtB); err != nil {
		t.Errorf("DEL b: %v", err)
	}
}
