package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// isolationScenario is two tenants on one node: team's pod a (lxc-a),
// whose policy allows TCP 80 from anywhere, and other's pod b (lxc-b),
// whose policy allows TCP 443 from 192.168.0.0/16. Cases add a policy
// that cannot be enforced and check it touches nothing but what it selects.
func isolationScenario(extra ...*policyapi.NetworkPolicy) *Snapshot {
	sc := scenario{
		pods: []*policyapi.Pod{mkPod("team", "a", ips("10.0.0.1"), "app", "a"), mkPod("other", "b", ips("10.0.0.2"), "app", "b")},
		policies: append([]*policyapi.NetworkPolicy{
			mkPolicy("team", "allow-a", sel("app", "a"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(80)}}}}),
			mkPolicy("other", "allow-b", sel("app", "b"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(443)},
				From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "192.168.0.0/16"}}}}}}),
		}, extra...),
		local: []LocalEndpoint{
			{HostIfName: "lxc-a", Namespace: "team", PodName: "a", IPv4: addr("10.0.0.1")},
			{HostIfName: "lxc-b", Namespace: "other", PodName: "b", IPv4: addr("10.0.0.2")},
		},
	}
	return sc.snapshot()
}

// exceptBlock is an ipBlock of 10.0.0.0/8 with n excepts.
func exceptBlock(n int) *policyapi.IPBlock {
	b := &policyapi.IPBlock{CIDR: "10.0.0.0/8"}
	for i := range n {
		b.Except = append(b.Except, fmt.Sprintf("10.%d.%d.0/24", 1+i/250, i%250))
	}
	return b
}

// TestFailClosed: a policy lockstep cannot compile, convert or fit fails
// closed for the endpoints it selects, in the directions it declares, and
// leaves every other endpoint exactly as it would be without it. Before,
// each of these failed the whole compilation: no endpoint of the node got
// its policy, and every CNI ADD failed.
func TestFailClosed(t *testing.T) {
	var manyPorts, seventeen []policyapi.NetworkPolicyPort
	for i := int32(0); i <= MaxPortRanges; i++ {
		manyPorts = append(manyPorts, tcp(1000+2*i))
	}
	seventeen = manyPorts[:17]
	for _, tc := range []struct {
		name   string
		bad    []*policyapi.NetworkPolicy
		limits Limits
		// failed are the policies reported failed, each with a part of
		// its reason; aFailed, a part of lxc-a's reason by direction
		// ("": that direction compiles as without the bad policies).
		failed  map[string]string
		aFailed [2]string
		// aPolicies are the failed policies that select lxc-a (its
		// FailedPolicies): the ones its node reports.
		aPolicies []string
	}{
		{
			name: "invalid port",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "bad", &policyapi.LabelSelector{},
				policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(0)}}}})},
			failed:    map[string]string{"team/bad": "port 0 out of range"},
			aFailed:   [2]string{policyapi.Ingress: "networkpolicy team/bad: spec.ingress[0]: ports[0]: port 0 out of range"},
			aPolicies: []string{"team/bad"},
		},
		{
			name: "cidr netip rejects, egress only",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "bad", sel("app", "a"), policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
				Egress: []policyapi.EgressRule{{To: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/8 "}}}}}})},
			failed:    map[string]string{"team/bad": "spec.egress[0]: to[0]: ipBlock: cidr"},
			aFailed:   [2]string{policyapi.Egress: "networkpolicy team/bad"},
			aPolicies: []string{"team/bad"},
		},
		{
			name: "unknown policy type fails both directions",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "bad", sel("app", "a"),
				policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{"Sideways"}})},
			failed:    map[string]string{"team/bad": `unknown policy type "Sideways"`},
			aFailed:   [2]string{policyapi.Ingress: "team/bad", policyapi.Egress: "team/bad"},
			aPolicies: []string{"team/bad"},
		},
		{
			name: "invalid pod selector selects the whole namespace",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "bad", sel("not a key!", "x"),
				policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{}}})},
			failed:    map[string]string{"team/bad": "spec.podSelector"},
			aFailed:   [2]string{policyapi.Ingress: "team/bad"},
			aPolicies: []string{"team/bad"},
		},
		{
			name: "more port ranges than a key holds",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "ports", &policyapi.LabelSelector{},
				policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: manyPorts}}})},
			aFailed: [2]string{policyapi.Ingress: "ingress rules for peer 0 protocol 6 need 4098 port ranges, at most 4096 fit (policies: team/allow-a, team/ports)"},
		},
		{
			name: "namespace over its prefix budget, policy selecting no pod",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "cidrs", sel("app", "nobody"), policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: exceptBlock(300)}}}}})},
			limits: Limits{PrefixesPerNamespace: 100},
			failed: map[string]string{
				"team/cidrs":   "namespace team is over its budget: its policies hold 301 ipBlock prefixes, at most 100",
				"team/allow-a": "namespace team is over its budget",
			},
			aFailed:   [2]string{policyapi.Ingress: "team/allow-a: namespace team is over its budget"},
			aPolicies: []string{"team/allow-a"},
		},
		{
			name: "namespace over its rule budget",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "rules", sel("app", "nobody"), policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{Ports: seventeen, From: []policyapi.NetworkPolicyPeer{{PodSelector: sel("x", "1")}, {PodSelector: sel("x", "2")}}}}})},
			limits:    Limits{RulesPerNamespace: 20},
			failed:    map[string]string{"team/rules": "35 rule entries", "team/allow-a": "35 rule entries"},
			aFailed:   [2]string{policyapi.Ingress: "over its budget"},
			aPolicies: []string{"team/allow-a"},
		},
		{
			name: "node's prefixes full: the largest namespace fails",
			bad: []*policyapi.NetworkPolicy{mkPolicy("team", "cidrs", sel("app", "nobody"), policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: exceptBlock(30)}}}}})},
			limits:    Limits{PrefixesPerNamespace: 100, Prefixes: 20},
			failed:    map[string]string{"team/cidrs": "prefixes are full (at most 20)", "team/allow-a": "namespace team holds 31"},
			aFailed:   [2]string{policyapi.Ingress: "team/allow-a"},
			aPolicies: []string{"team/allow-a"},
		},
		{
			name: "invalid policies' prefixes take no room on the node",
			bad: []*policyapi.NetworkPolicy{
				mkPolicy("a1", "bad", sel("app", "nobody"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(0)},
					From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "172.16.0.0/12"}}}}}}),
				mkPolicy("a2", "bad", sel("app", "nobody"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(0)},
					From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "172.16.0.0/12"}}}}}}),
			},
			limits: Limits{PrefixesPerNamespace: 100, Prefixes: 2},
			failed: map[string]string{"a1/bad": "port 0 out of range", "a2/bad": "port 0 out of range"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := isolationScenario()
			base.Limits = tc.limits
			want, err := Compile(base)
			if err != nil {
				t.Fatalf("without the bad policy: %v", err)
			}
			s := isolationScenario(tc.bad...)
			s.Limits = tc.limits
			got, err := Compile(s)
			if err != nil {
				t.Fatalf("compile: %v; want the bad policy to fail alone", err)
			}
			inc := NewIncremental()
			inc.SetLimits(tc.limits)
			feedSnapshot(inc, s)
			if igot, err := inc.Compile(); err != nil {
				t.Fatalf("incremental compile: %v", err)
			} else if diff := diffDesired(igot, got); diff != "" {
				t.Errorf("incremental result differs from Compile:\n%s", diff)
			}

			if !reflect.DeepEqual(got.Endpoints["lxc-b"], want.Endpoints["lxc-b"]) {
				t.Errorf("lxc-b, selected by no bad policy: got %+v, want %+v as without it", got.Endpoints["lxc-b"], want.Endpoints["lxc-b"])
			}
			if !maps.Equal(got.CIDRs, want.CIDRs) {
				t.Errorf("CIDRs: got %d entries %v, want %v as without the bad policy", len(got.CIDRs), got.CIDRs, want.CIDRs)
			}
			if names := slices.Sorted(maps.Keys(got.FailedPolicies)); !slices.Equal(names, slices.Sorted(maps.Keys(tc.failed))) {
				t.Errorf("failed policies %v, want %v", got.FailedPolicies, tc.failed)
			}
			for name, part := range tc.failed {
				if !strings.Contains(got.FailedPolicies[name], part) {
					t.Errorf("policy %s: reason %q, want one containing %q", name, got.FailedPolicies[name], part)
				}
			}
			a, wa := got.Endpoints["lxc-a"], want.Endpoints["lxc-a"]
			if !slices.Equal(a.FailedPolicies, tc.aPolicies) {
				t.Errorf("lxc-a: failed policies selecting it %v, want %v", a.FailedPolicies, tc.aPolicies)
			}
			for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
				isolated := [2]bool{a.IngressIsolated, a.EgressIsolated}[d]
				wasIsolated := [2]bool{wa.IngressIsolated, wa.EgressIsolated}[d]
				if tc.aFailed[d] == "" {
					if a.Failed[d] != "" || isolated != wasIsolated || !maps.Equal(rulesOf(a, d), rulesOf(wa, d)) {
						t.Errorf("lxc-a %s: got %+v, want as without the bad policy: %+v", d, a, wa)
					}
					continue
				}
				if !strings.Contains(a.Failed[d], tc.aFailed[d]) {
					t.Errorf("lxc-a %s: reason %q, want one containing %q", d, a.Failed[d], tc.aFailed[d])
				}
				if !isolated || len(rulesOf(a, d)) > 0 {
					t.Errorf("lxc-a %s: isolated %v, rules %v; want isolated with no allow", d, isolated, rulesOf(a, d))
				}
			}
		})
	}
}

// rulesOf returns ep's rules of direction d (slices compared by content).
func rulesOf(ep *EndpointPolicy, d policyapi.Direction) map[RuleKey]string {
	out := map[RuleKey]string{}
	for k, rs := range ep.Rules {
		if k.Dir == d {
			out[k] = fmt.Sprint(rs)
		}
	}
	return out
}

// feedSnapshot hands every object of s to inc.
func feedSnapshot(inc *Incremental, s *Snapshot) {
	for _, ns := range s.Namespaces {
		inc.SetNamespace(ns)
	}
	for _, p := range s.Pods {
		inc.SetPod(p)
	}
	for _, np := range s.Policies {
		inc.SetPolicy(np)
	}
	for k, id := range s.Identities {
		inc.SetIdentity(k, id)
	}
	inc.SetLocal(s.Local)
}

// TestFailClosedRecovers: once the bad policy is fixed (or its namespace
// back within budget), the endpoints it selected get their policy again,
// and the failure is no longer reported.
func TestFailClosedRecovers(t *testing.T) {
	inc := NewIncremental()
	inc.SetLimits(Limits{PrefixesPerNamespace: 100})
	feedSnapshot(inc, isolationScenario())
	before, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	big := mkPolicy("team", "cidrs", sel("app", "nobody"), policyapi.NetworkPolicySpec{
		Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: exceptBlock(300)}}}}})
	inc.SetPolicy(big)
	over, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if over.Endpoints["lxc-a"].Failed[policyapi.Ingress] == "" || len(over.FailedPolicies) != 2 {
		t.Fatalf("over budget: lxc-a %+v, failed %v; want lxc-a and both team policies failed", over.Endpoints["lxc-a"], over.FailedPolicies)
	}
	if over.Endpoints["lxc-b"] != before.Endpoints["lxc-b"] {
		t.Error("lxc-b's policy was recomputed by another namespace going over budget")
	}
	inc.DeletePolicy("team", "cidrs")
	after, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after.Endpoints["lxc-a"], before.Endpoints["lxc-a"]) || len(after.FailedPolicies) != 0 {
		t.Errorf("back within budget: lxc-a %+v, failed %v; want lxc-a as before (%+v), none failed", after.Endpoints["lxc-a"], after.FailedPolicies, before.Endpoints["lxc-a"])
	}
}
