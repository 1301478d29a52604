//go:build linux

package datapath

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedPrefixHogCannotFillTheNode: one namespace's policy, which
// selects no pod on the node, lists more except prefixes than the
// longest-prefix map holds. Without limits the compiled state does not
// fit: Apply fails with "no space left on device", and with it every
// later CNI ADD of the node. With the agent's limits the namespace fails
// closed alone: the state fits, and another tenant's pod is enforced as
// its own policy says.
func TestPrivilegedPrefixHogCannotFillTheNode(t *testing.T) {
	testenv.Privileged(t)
	hog := &policyapi.IPBlock{CIDR: "10.0.0.0/8"}
	for i := range policy.CIDRCapacity + 1000 {
		hog.Except = append(hog.Except, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i << 4)}), 28).String())
	}
	tenant := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "tenant", Name: "web", Labels: map[string]string{"app": "web"}}}
	snapshot := func(l policy.Limits) *policy.Snapshot {
		return &policy.Snapshot{
			Pods: []*policyapi.Pod{tenant},
			Policies: []*policyapi.NetworkPolicy{
				{ObjectMeta: policyapi.ObjectMeta{Namespace: "tenant", Name: "web"}, Spec: policyapi.NetworkPolicySpec{
					PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Ingress:     []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(80)}}}}}},
				{ObjectMeta: policyapi.ObjectMeta{Namespace: "hostile", Name: "hog"}, Spec: policyapi.NetworkPolicySpec{
					PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}},
					Ingress:     []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: hog}}}}}},
			},
			Identities: map[string]policyapi.Peer{policyapi.IdentityKey(nil, tenant): policyapi.FirstPodIdentity},
			Local:      []policy.LocalEndpoint{{HostIfName: podIf, Namespace: "tenant", PodName: "web", IPv4: addr(podV4)}},
			Limits:     l,
		}
	}
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)

	unbounded, err := policy.Compile(snapshot(policy.Limits{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(unbounded); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("apply %d CIDR prefixes without limits: %v, want the map to be full (the failure the limits prevent)", len(unbounded.CIDRs), err)
	}

	bounded, err := policy.Compile(snapshot(policy.DefaultLimits))
	if err != nil {
		t.Fatal(err)
	}
	if bounded.FailedPolicies["hostile/hog"] == "" || len(bounded.FailedPolicies) != 1 {
		t.Fatalf("failed policies %v, want hostile/hog alone", bounded.FailedPolicies)
	}
	mustApply(t, d, bounded)
	if n := mapEntries(t, d, "lockstep_cidrs"); n > policy.CIDRCapacity || n < 2 {
		t.Errorf("lockstep_cidrs holds %d entries", n)
	}
	tcp := policyapi.ProtoTCP
	checkVerdicts(t, d, []verdictCase{
		{"the tenant's allowed port", policyapi.Ingress, packet{src: "10.9.9.9", dst: podV4, proto: tcp, sport: 40000, dport: 80}, actOK},
		{"the tenant's other port", policyapi.Ingress, packet{src: "10.9.9.9", dst: podV4, proto: tcp, sport: 40000, dport: 81}, actShot},
	})
}

// mapEntries counts the entries of the pinned map name.
func mapEntries(tb testing.TB, d *Datapath, name string) int {
	tb.Helper()
	stats, err := d.Stats()
	if err != nil {
		tb.Fatalf("stats: %v", err)
	}
	n, ok := stats[name]
	if !ok {
		tb.Fatalf("no map %s in %v", name, stats)
	}
	return n
}
