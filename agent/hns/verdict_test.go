package hns

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The verdict scenarios: two namespaces, pods with labels, two of them
// local (endpoints ep-a and ep-b); policies are added per case.

func ns(name string, kv ...string) *policyapi.Namespace {
	return &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: name, Labels: kvs(kv...)}}
}

func kvs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func pod(namespace, name string, addrs []string, kv ...string) *policyapi.Pod {
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: namespace, Name: name, Labels: kvs(kv...)}}
	for _, a := range addrs {
		p.Status.PodIPs = append(p.Status.PodIPs, policyapi.PodIP{IP: a})
	}
	return p
}

func sel(kv ...string) *policyapi.LabelSelector {
	return &policyapi.LabelSelector{MatchLabels: kvs(kv...)}
}

func port(proto policyapi.Protocol, p int32, end ...int32) policyapi.NetworkPolicyPort {
	np := policyapi.NetworkPolicyPort{Protocol: &proto, Port: policyapi.FromInt(p)}
	if len(end) > 0 {
		np.EndPort = &end[0]
	}
	return np
}

func netpol(name string, podSel *policyapi.LabelSelector, spec policyapi.NetworkPolicySpec) *policyapi.NetworkPolicy {
	spec.PodSelector = *podSel
	return &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: name}, Spec: spec}
}

func from(ports []policyapi.NetworkPolicyPort, peers ...policyapi.NetworkPolicyPeer) policyapi.NetworkPolicySpec {
	return policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: ports, From: peers}}}
}

func block(cidr string, except ...string) policyapi.NetworkPolicyPeer {
	return policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: cidr, Except: except}}
}

func podPeer(kv ...string) policyapi.NetworkPolicyPeer {
	return policyapi.NetworkPolicyPeer{PodSelector: sel(kv...)}
}

// compileScenario compiles the fixed cluster with policies, identities
// assigned in sorted key order.
func compileScenario(t *testing.T, policies ...*policyapi.NetworkPolicy) *policy.Desired {
	t.Helper()
	s := &policy.Snapshot{
		Namespaces: map[string]*policyapi.Namespace{"team": ns("team", "env", "prod"), "other": ns("other", "env", "dev")},
		Pods: []*policyapi.Pod{
			pod("team", "a", []string{"10.0.0.1", "fd00::1"}, "app", "a"),
			pod("team", "b", []string{"10.0.0.2"}, "app", "b"),
			pod("team", "c", []string{"10.0.0.3"}, "app", "c"),
			pod("other", "x", []string{"10.0.1.3"}, "app", "x"),
			pod("other", "y", []string{"10.0.1.4", "fd00::4"}, "app", "b"),
		},
		Policies:   policies,
		Identities: map[string]policyapi.Peer{},
		Local: []policy.LocalEndpoint{
			{HostIfName: "ep-a", Namespace: "team", PodName: "a", IPv4: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00::1")},
			{HostIfName: "ep-b", Namespace: "team", PodName: "b", IPv4: netip.MustParseAddr("10.0.0.2")},
		},
	}
	var keys []string
	for _, p := range s.Pods {
		keys = append(keys, policyapi.IdentityKey(s.Namespaces[p.Namespace], p))
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		s.Identities[k] = policyapi.FirstPodIdentity + policyapi.Peer(len(s.Identities))
	}
	d, err := policy.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func verdictCases() []struct {
	name     string
	policies []*policyapi.NetworkPolicy
} {
	tcp, udp, sctp := policyapi.TCP, policyapi.UDP, policyapi.SCTP
	ports := func(p ...policyapi.NetworkPolicyPort) []policyapi.NetworkPolicyPort { return p }
	egressOnly := []policyapi.PolicyType{policyapi.PolicyTypeEgress}
	return []struct {
		name     string
		policies []*policyapi.NetworkPolicy
	}{
		{name: "no policy: nothing isolated, no ACLs"},
		{name: "deny all ingress in team", policies: []*policyapi.NetworkPolicy{netpol("deny", sel(), policyapi.NetworkPolicySpec{})}},
		{name: "pod selector on TCP 80", policies: []*policyapi.NetworkPolicy{
			netpol("web", sel("app", "a"), from(ports(port(tcp, 80)), podPeer("app", "b")))}},
		{name: "namespace selector, port range and UDP", policies: []*policyapi.NetworkPolicy{
			netpol("ns", sel("app", "a"), from(ports(port(tcp, 1000, 2000), port(udp, 53)),
				policyapi.NetworkPolicyPeer{NamespaceSelector: sel("env", "dev")}))}},
		{name: "egress ipBlocks with excepts", policies: []*policyapi.NetworkPolicy{
			netpol("out", sel("app", "a"), policyapi.NetworkPolicySpec{PolicyTypes: egressOnly, Egress: []policyapi.EgressRule{
				{Ports: ports(port(tcp, 443)), To: []policyapi.NetworkPolicyPeer{block("10.0.0.0/8", "10.0.1.0/24")}},
				{Ports: ports(port(udp, 53)), To: []policyapi.NetworkPolicyPeer{block("0.0.0.0/0", "10.0.0.0/8")}},
			}})}},
		{name: "peers without ports allow portless protocols", policies: []*policyapi.NetworkPolicy{
			netpol("all", sel("app", "a"), from(nil, podPeer("app", "b"), podPeer("app", "c"))),
			netpol("ssh", sel("app", "a"), from(ports(port(tcp, 22)))),
		}},
		{name: "egress isolated, ingress open", policies: []*policyapi.NetworkPolicy{
			netpol("db", sel(), policyapi.NetworkPolicySpec{PolicyTypes: egressOnly, Egress: []policyapi.EgressRule{
				{Ports: ports(port(tcp, 5432)), To: []policyapi.NetworkPolicyPeer{podPeer("app", "b")}}}})}},
		{name: "ipBlock without ports, selector ports, egress denied", policies: []*policyapi.NetworkPolicy{
			netpol("mix", sel("app", "b"), policyapi.NetworkPolicySpec{
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress},
				Ingress: []policyapi.IngressRule{
					{From: []policyapi.NetworkPolicyPeer{block("192.168.0.0/16")}},
					{Ports: ports(port(tcp, 80), port(tcp, 81)), From: []policyapi.NetworkPolicyPeer{podPeer("app", "c")}},
				}})}},
		{name: "SCTP from IPv6 block, everything from any on another policy", policies: []*policyapi.NetworkPolicy{
			netpol("v6", sel("app", "a"), from(ports(port(sctp, 9000)), block("fd00::/64"))),
			netpol("open", sel("app", "b"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{}}}),
		}},
	}
}

// TestVerdictsMatchTheReference applies each scenario through a Dataplane
// on Memory and checks every probe's verdict against the reference
// evaluation of the compiled policy.
func TestVerdictsMatchTheReference(t *testing.T) {
	for _, tc := range verdictCases() {
		t.Run(tc.name, func(t *testing.T) {
			d := compileScenario(t, tc.policies...)
			m := NewMemory()
			m.AddEndpoint("ep-a")
			m.AddEndpoint("ep-b")
			if err := New(m).Apply(d); err != nil {
				t.Fatal(err)
			}
			assertMatches(t, m, d)
		})
	}
}

// TestVerdictsFollowEveryChange applies the scenarios one after another
// through one Dataplane: each incremental apply ends matching its state.
func TestVerdictsFollowEveryChange(t *testing.T) {
	m := NewMemory()
	m.AddEndpoint("ep-a")
	m.AddEndpoint("ep-b")
	dp := New(m)
	cases := verdictCases()
	for _, i := range []int{0, 2, 3, 5, 4, 7, 8, 1, 6, 5, 0} {
		d := compileScenario(t, cases[i].policies...)
		if err := dp.Apply(d); err != nil {
			t.Fatalf("apply %q: %v", cases[i].name, err)
		}
		assertMatches(t, m, d)
	}
}

// TestVerdictHarnessDetectsWrongACLs shows the comparison can fail: ACLs
// that allow one port too many, miss a direction, or default to allow are
// caught.
func TestVerdictHarnessDetectsWrongACLs(t *testing.T) {
	d := compileScenario(t, verdictCases()[2].policies...)
	for _, tc := range []struct {
		name   string
		tamper func([]ACL) []ACL
	}{
		{"port 81 allowed too", func(acls []ACL) []ACL {
			for i := range acls {
				if acls[i].LocalPorts != nil {
					acls[i].LocalPorts = []policy.PortRange{{Lo: 80, Hi: 81}}
				}
			}
			return acls
		}},
		{"ingress ACLs gone", func(acls []ACL) []ACL {
			return slices.DeleteFunc(acls, func(a ACL) bool { return a.Direction == In })
		}},
		{"default allows", func(acls []ACL) []ACL {
			for i := range acls {
				if acls[i].Priority == prioDefault {
					acls[i].Action = Allow
				}
			}
			return acls
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory()
			m.AddEndpoint("ep-a")
			m.AddEndpoint("ep-b")
			if err := New(m).Apply(d); err != nil {
				t.Fatal(err)
			}
			_, acls := m.State()
			if err := m.SetEndpointACLs("ep-a", tc.tamper(acls["ep-a"])); err != nil {
				t.Fatal(err)
			}
			if bad := verdictMismatches(m, d); len(bad) == 0 {
				t.Fatal("tampered ACLs passed the verdict comparison")
			}
		})
	}
}

// TestMemoryEnforcesHNSInvariants: the requests HNS refuses, Memory
// refuses and records.
func TestMemoryEnforcesHNSInvariants(t *testing.T) {
	ipset := func(id string, v ...string) SetPolicy { return SetPolicy{ID: id, Name: id, Type: SetIPSet, Values: v} }
	nested := func(id string, v ...string) SetPolicy {
		return SetPolicy{ID: id, Name: id, Type: SetNestedIPSet, Values: v}
	}
	allowFrom := func(sets ...string) []ACL {
		return []ACL{{ID: "lockstep-in-0", Direction: In, Action: Allow, RemoteSets: sets, Priority: 100}}
	}
	for _, tc := range []struct {
		name string
		do   func(m *Memory) error
		want error
	}{
		{"delete a set an ACL references", func(m *Memory) error {
			return m.DeleteSetPolicies(ids("lockstep-id-1"))
		}, ErrSetInUse},
		{"delete a set a nested set references", func(m *Memory) error {
			return m.DeleteSetPolicies(ids("lockstep-id-2"))
		}, ErrSetInUse},
		{"delete a nested set and its member together", func(m *Memory) error {
			return m.DeleteSetPolicies(ids("lockstep-grp", "lockstep-id-2"))
		}, nil},
		{"ACL referencing a missing set", func(m *Memory) error {
			return m.SetEndpointACLs("ep", allowFrom("lockstep-id-9"))
		}, ErrSetNotFound},
		{"nested set with a missing member", func(m *Memory) error {
			return m.AddSetPolicies([]SetPolicy{nested("lockstep-grp2", "lockstep-id-9")})
		}, ErrSetNotFound},
		{"nested set and its member in one request, member first", func(m *Memory) error {
			return m.AddSetPolicies([]SetPolicy{ipset("lockstep-id-3", "10.0.0.3"), nested("lockstep-grp3", "lockstep-id-3")})
		}, nil},
		{"add a set twice", func(m *Memory) error { return m.AddSetPolicies([]SetPolicy{ipset("lockstep-id-1")}) }, ErrSetExists},
		{"update a missing set", func(m *Memory) error { return m.UpdateSetPolicies([]SetPolicy{ipset("lockstep-id-9")}) }, ErrSetNotFound},
		{"malformed address", func(m *Memory) error { return m.AddSetPolicies([]SetPolicy{ipset("lockstep-id-9", "10.0.0.300")}) }, ErrInvalid},
		{"ACLs of a missing endpoint: not a violation", func(m *Memory) error {
			return m.SetEndpointACLs("gone", nil)
		}, ErrEndpointNotFound},
		{"delete an unreferenced set", func(m *Memory) error {
			if err := m.SetEndpointACLs("ep", nil); err != nil {
				return err
			}
			return m.DeleteSetPolicies(ids("lockstep-id-1"))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory()
			m.AddEndpoint("ep")
			if err := m.AddSetPolicies([]SetPolicy{ipset("lockstep-id-1", "10.0.0.1"), ipset("lockstep-id-2", "10.0.0.2")}); err != nil {
				t.Fatal(err)
			}
			if err := m.AddSetPolicies([]SetPolicy{nested("lockstep-grp", "lockstep-id-2")}); err != nil {
				t.Fatal(err)
			}
			if err := m.SetEndpointACLs("ep", allowFrom("lockstep-id-1")); err != nil {
				t.Fatal(err)
			}
			err := tc.do(m)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			violation := tc.want != nil && !errors.Is(tc.want, ErrEndpointNotFound)
			if got := len(m.Violations()) > 0; got != violation {
				t.Fatalf("recorded as violation: %v, want %v", got, violation)
			}
		})
	}
}

// TestSubtract checks the prefix arithmetic world and CIDR class sets are
// built with.
func TestSubtract(t *testing.T) {
	for _, tc := range []struct {
		p     string
		holes []string
		want  []string
	}{
		{"10.0.0.0/8", nil, []string{"10.0.0.0/8"}},
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, nil},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, []string{"10.0.0.0", "10.0.0.2/31"}},
		{"10.0.0.0/8", []string{"11.0.0.0/8", "fd00::/8"}, []string{"10.0.0.0/8"}},
		{"10.0.0.0/24", []string{"10.0.0.0/25", "10.0.0.128/26"}, []string{"10.0.0.192/26"}},
	} {
		var holes []netip.Prefix
		for _, h := range tc.holes {
			holes = append(holes, netip.MustParsePrefix(h))
		}
		got := prefixValues(subtract(netip.MustParsePrefix(tc.p), holes))
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s minus %v = %v, want %v", tc.p, tc.holes, got, tc.want)
		}
	}
}
