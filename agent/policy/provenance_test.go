package policy

import (
	"slices"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestOriginsNameTheFirstAllowingRule checks that every rule key names
// the smallest rule (by namespace, name, direction, index) that allows
// it, from Compile and from Incremental alike, and that deleting that
// policy hands the key to the next one.
func TestOriginsNameTheFirstAllowingRule(t *testing.T) {
	from := func(kv ...string) []policyapi.NetworkPolicyPeer {
		return []policyapi.NetworkPolicyPeer{{PodSelector: sel(kv...)}}
	}
	ingress := func(rules ...policyapi.IngressRule) policyapi.NetworkPolicySpec {
		return policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress}, Ingress: rules}
	}
	b := mkPolicy("team", "b-web", sel("app", "web"), ingress(
		policyapi.IngressRule{From: from("app", "client"), Ports: []policyapi.NetworkPolicyPort{tcp(80)}}))
	a := mkPolicy("team", "a-web", sel("app", "web"), ingress(
		policyapi.IngressRule{From: from("app", "nobody"), Ports: []policyapi.NetworkPolicyPort{tcp(443)}},
		policyapi.IngressRule{From: from("app", "client"), Ports: []policyapi.NetworkPolicyPort{tcp(443)}},
		policyapi.IngressRule{Ports: []policyapi.NetworkPolicyPort{tcp(8080)}}))
	sc := scenario{
		pods:     []*policyapi.Pod{mkPod("team", "web", ips("10.0.0.1"), "app", "web"), mkPod("team", "client", ips("10.0.0.2"), "app", "client")},
		policies: []*policyapi.NetworkPolicy{b, a},
		local:    []LocalEndpoint{{HostIfName: "lxc-web", Namespace: "team", PodName: "web", IPv4: addr("10.0.0.1")}},
	}
	s := sc.snapshot()
	client := idOf(t, s, "team/client")
	tcpFrom := func(p policyapi.Peer) RuleKey {
		return RuleKey{Peer: p, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}
	}

	check := func(t *testing.T, d *Desired, want map[RuleKey]RuleOrigin) {
		t.Helper()
		got := d.Endpoints["lxc-web"].Origins
		if len(got) != len(want) {
			t.Errorf("origins %v, want %v", got, want)
		}
		for k, w := range want {
			if got[k] == nil || *got[k] != w {
				t.Errorf("origin of %+v = %v, want %v", k, got[k], w)
			}
		}
		for k := range d.Endpoints["lxc-web"].Rules {
			if _, ok := got[k]; !ok {
				t.Errorf("rule key %+v has no origin", k)
			}
		}
	}
	both := map[RuleKey]RuleOrigin{
		tcpFrom(client):            {Namespace: "team", Name: "a-web", Dir: policyapi.Ingress, Index: 1},
		tcpFrom(policyapi.PeerAny): {Namespace: "team", Name: "a-web", Dir: policyapi.Ingress, Index: 2},
	}
	onlyB := map[RuleKey]RuleOrigin{tcpFrom(client): {Namespace: "team", Name: "b-web", Dir: policyapi.Ingress, Index: 0}}

	d, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("compile", func(t *testing.T) { check(t, d, both) })

	inc := NewIncremental()
	feedSnapshot(inc, s)
	d, err = inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("incremental", func(t *testing.T) { check(t, d, both) })

	inc.DeletePolicy("team", "a-web")
	d, err = inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("incremental after delete", func(t *testing.T) { check(t, d, onlyB) })

	sc.policies = []*policyapi.NetworkPolicy{b}
	d, err = Compile(sc.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("compile after delete", func(t *testing.T) { check(t, d, onlyB) })

	if got := both[tcpFrom(client)].String(); got != "team/a-web ingress[1]" {
		t.Errorf("String() = %q", got)
	}
}

// TestIsolatorsNameTheSelectingPolicies checks that an endpoint's
// Isolators name, by direction, the policies selecting it for that
// direction, sorted, from Compile and Incremental alike, including a
// deny-all policy without rules, and that a deleted policy leaves them.
func TestIsolatorsNameTheSelectingPolicies(t *testing.T) {
	types := func(ts ...policyapi.PolicyType) policyapi.NetworkPolicySpec {
		return policyapi.NetworkPolicySpec{PolicyTypes: ts}
	}
	in, eg := policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress
	sc := scenario{
		pods: []*policyapi.Pod{mkPod("team", "web", ips("10.0.0.1"), "app", "web")},
		policies: []*policyapi.NetworkPolicy{
			mkPolicy("team", "z-both", sel("app", "web"), types(in, eg)),
			mkPolicy("team", "a-in", sel("app", "web"), types(in)),
			mkPolicy("team", "other", sel("app", "db"), types(in, eg)),
		},
		local: []LocalEndpoint{{HostIfName: "lxc-web", Namespace: "team", PodName: "web", IPv4: addr("10.0.0.1")}},
	}
	check := func(t *testing.T, d *Desired, in, eg []string) {
		t.Helper()
		got := d.Endpoints["lxc-web"].Isolators
		if !slices.Equal(got[policyapi.Ingress], in) || !slices.Equal(got[policyapi.Egress], eg) {
			t.Errorf("isolators %q, want ingress %q and egress %q", got, in, eg)
		}
	}
	d, err := Compile(sc.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("compile", func(t *testing.T) { check(t, d, []string{"team/a-in", "team/z-both"}, []string{"team/z-both"}) })
	inc := NewIncremental()
	feedSnapshot(inc, sc.snapshot())
	if d, err = inc.Compile(); err != nil {
		t.Fatal(err)
	}
	t.Run("incremental", func(t *testing.T) { check(t, d, []string{"team/a-in", "team/z-both"}, []string{"team/z-both"}) })
	inc.DeletePolicy("team", "z-both")
	if d, err = inc.Compile(); err != nil {
		t.Fatal(err)
	}
	t.Run("incremental after delete", func(t *testing.T) { check(t, d, []string{"team/a-in"}, nil) })
}
