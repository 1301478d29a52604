//go:build linux

package datapath

import (
	"errors"
	"fmt"
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

// TestPrivilegedServiceHogCannotFillTheNode: one namespace's Services ask
// for more frontends, more backends, or more backends for one frontend
// than the Service maps hold. Without limits the compiled state does not
// fit: Apply refuses it whole with ErrServiceCapacity, and with it every
// later policy change and CNI ADD of the node. With the agent's limits the
// namespace is left to kube-proxy alone: the state fits, and another
// tenant's Service is translated.
func TestPrivilegedServiceHogCannotFillTheNode(t *testing.T) {
	testenv.Privileged(t)
	tenant := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "tenant", Name: "web"},
		Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []policyapi.ServicePort{{Name: "p0", Port: 80, Protocol: "TCP"}}}}
	tenantSlice := endpointSlice("tenant", "web-1", "web", 1, 1)
	tenantFrontend := policy.ServiceFrontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: policyapi.ProtoTCP}
	hog := func(ports int) *policyapi.Service {
		s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "hostile", Name: "hog"}, Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.20"}}
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, policyapi.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1 + i), Protocol: "TCP"})
		}
		return s
	}
	d := newTestDatapath(t)
	for _, tc := range []struct {
		name  string
		svc   *policyapi.Service
		slice *policyapi.EndpointSlice
	}{
		{name: "frontends", svc: hog(policy.ServiceFrontendCapacity + 1)},
		{name: "backends", svc: hog(4), slice: endpointSlice("hostile", "hog-1", "hog", policy.ServiceBackendCapacity/4+1, 4)},
		{name: "backends of one frontend", svc: hog(1), slice: endpointSlice("hostile", "hog-1", "hog", policy.MaxBackendsPerFrontend+1, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snapshot := func(l policy.Limits) *policy.Snapshot {
				s := &policy.Snapshot{Services: []*policyapi.Service{tenant, tc.svc}, EndpointSlices: []*policyapi.EndpointSlice{tenantSlice}, Limits: l}
				if tc.slice != nil {
					s.EndpointSlices = append(s.EndpointSlices, tc.slice)
				}
				return s
			}
			unbounded, err := policy.Compile(snapshot(policy.Limits{}))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Apply(unbounded); !errors.Is(err, ErrServiceCapacity) {
				t.Fatalf("apply %d frontends without limits: %v, want ErrServiceCapacity (the failure the limits prevent)", len(unbounded.Services), err)
			}
			bounded, err := policy.Compile(snapshot(policy.DefaultLimits))
			if err != nil {
				t.Fatal(err)
			}
			if e := bounded.Services[tenantFrontend]; e == nil || len(e.Backends) != 1 || len(bounded.Services) != 1 {
				t.Fatalf("%d frontends compiled, want the tenant's alone: %v", len(bounded.Services), e)
			}
			if bounded.ServicesOverCapacity["hostile"] == "" || len(bounded.ServicesOverCapacity) > 1 {
				t.Errorf("over capacity %v", bounded.ServicesOverCapacity)
			}
			mustApply(t, d, bounded)
			checkLive(t, d, "the tenant's Service", bounded.Services)
		})
	}
}

// endpointSlice returns EndpointSlice ns/name of Service svc with n ready
// IPv4 endpoints and ports slice ports, p0 on 8080, p1 on 8081 and so on,
// as the Service ports of those names.
func endpointSlice(ns, name, svc string, n, ports int) *policyapi.EndpointSlice {
	s := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{policyapi.ServiceNameLabel: svc}},
		AddressType: policyapi.AddressTypeIPv4}
	for i := range ports {
		name, port := fmt.Sprintf("p%d", i), int32(8080+i)
		s.Ports = append(s.Ports, policyapi.EndpointSlicePort{Name: &name, Port: &port})
	}
	for i := range n {
		s.Endpoints = append(s.Endpoints, policyapi.SliceEndpoint{Addresses: []string{netip.AddrFrom4([4]byte{10, byte(1 + i>>16), byte(i >> 8), byte(i)}).String()}})
	}
	return s
}
