package policy

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The scenario helpers build a small cluster: namespaces, pods with
// labels, named ports and addresses, and policies. Identities are assigned
// as the caller would (one per distinct IdentityKey), and expectations
// name peers by pod ("team/b" is the identity of pod b in team), by
// "any", or by CIDR class number ("class1").

func mkNS(name string, kv ...string) *policyapi.Namespace {
	return &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: name, Labels: labels(kv...)}}
}

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// mkPod returns pod ns/name with labels kv and addresses ips. Named ports
// are added with withPorts.
func mkPod(nsName, name string, ips []string, kv ...string) *policyapi.Pod {
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Name: name, Namespace: nsName, Labels: labels(kv...)}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, policyapi.PodIP{IP: ip})
	}
	return p
}

func withPorts(p *policyapi.Pod, ports ...policyapi.ContainerPort) *policyapi.Pod {
	p.Spec.Containers = append(p.Spec.Containers, policyapi.Container{Name: "main", Ports: ports})
	return p
}

func ips(s ...string) []string { return s }

func sel(kv ...string) *policyapi.LabelSelector {
	return &policyapi.LabelSelector{MatchLabels: labels(kv...)}
}

func tcp(port int32) policyapi.NetworkPolicyPort {
	return policyapi.NetworkPolicyPort{Port: policyapi.FromInt(port)}
}

func named(name string) policyapi.NetworkPolicyPort {
	return policyapi.NetworkPolicyPort{Port: policyapi.FromString(name)}
}

func mkPolicy(nsName, name string, podSel *policyapi.LabelSelector, spec policyapi.NetworkPolicySpec) *policyapi.NetworkPolicy {
	spec.PodSelector = *podSel
	return &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Name: name, Namespace: nsName}, Spec: spec}
}

type scenario struct {
	namespaces []*policyapi.Namespace
	pods       []*policyapi.Pod
	policies   []*policyapi.NetworkPolicy
	local      []LocalEndpoint
}

// snapshot assigns identities in sorted key order from FirstPodIdentity.
func (sc scenario) snapshot() *Snapshot {
	s := &Snapshot{Namespaces: map[string]*policyapi.Namespace{}, Pods: sc.pods, Policies: sc.policies, Local: sc.local, Identities: map[string]policyapi.Peer{}}
	for _, ns := range sc.namespaces {
		s.Namespaces[ns.Name] = ns
	}
	var keys []string
	for _, p := range sc.pods {
		keys = append(keys, policyapi.IdentityKey(s.Namespaces[policyapi.PodNamespace(p)], p))
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		s.Identities[k] = policyapi.FirstPodIdentity + policyapi.Peer(len(s.Identities))
	}
	return s
}

// idOf returns the identity of pod "ns/name" in s.
func idOf(t *testing.T, s *Snapshot, ref string) policyapi.Peer {
	t.Helper()
	for _, p := range s.Pods {
		if policyapi.PodNamespace(p)+"/"+p.Name == ref {
			return s.Identities[policyapi.IdentityKey(s.Namespaces[policyapi.PodNamespace(p)], p)]
		}
	}
	t.Fatalf("no pod %s", ref)
	return 0
}

// rule is one expected allow-list entry, peers named as described above.
type rule struct {
	peer   string
	dir    policyapi.Direction
	proto  uint8
	ranges []PortRange
}

func r1(lo, hi uint16) []PortRange { return []PortRange{{lo, hi}} }

// allOf is what a rule without ports gives one peer.
func allOf(peer string, d policyapi.Direction) []rule {
	return []rule{
		{peer, d, policyapi.ProtoTCP, r1(0, 65535)}, {peer, d, policyapi.ProtoUDP, r1(0, 65535)},
		{peer, d, policyapi.ProtoSCTP, r1(0, 65535)}, {peer, d, policyapi.ProtoOther, r1(0, 65535)},
	}
}

func rules(groups ...[]rule) []rule { return slices.Concat(groups...) }

func (sc scenario) resolve(t *testing.T, s *Snapshot, want []rule) map[RuleKey][]PortRange {
	t.Helper()
	out := map[RuleKey][]PortRange{}
	for _, r := range want {
		var peer policyapi.Peer
		switch {
		case r.peer == "any":
			peer = policyapi.PeerAny
		case strings.HasPrefix(r.peer, "class"):
			var n policyapi.Peer
			fmt.Sscan(strings.TrimPrefix(r.peer, "class"), &n)
			peer = policyapi.CIDRClassBit | n
		default:
			peer = idOf(t, s, r.peer)
		}
		k := RuleKey{Peer: peer, Dir: r.dir, Proto: r.proto}
		if _, dup := out[k]; dup {
			t.Fatalf("expectation lists %v twice", k)
		}
		out[k] = r.ranges
	}
	return out
}

func describe(t *testing.T, s *Snapshot, m map[RuleKey][]PortRange) string {
	names := map[policyapi.Peer]string{policyapi.PeerAny: "any"}
	for _, p := range s.Pods {
		id := s.Identities[policyapi.IdentityKey(s.Namespaces[policyapi.PodNamespace(p)], p)]
		names[id] += policyapi.PodNamespace(p) + "/" + p.Name + " "
	}
	var lines []string
	for k, v := range m {
		name := names[k.Peer]
		if k.Peer&policyapi.CIDRClassBit != 0 {
			name = fmt.Sprintf("class%d", k.Peer&^policyapi.CIDRClassBit)
		}
		lines = append(lines, fmt.Sprintf("  %s %s proto %d: %v", strings.TrimSpace(name), k.Dir, k.Proto, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// The local endpoint of most cases: pod team/a, 10.0.0.1 and fd00::1.
var localA = []LocalEndpoint{{HostIfName: "lxc-a", Namespace: "team", PodName: "a",
	IPv4: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00::1")}}

func TestCompileEndpointRules(t *testing.T) {
	nsTeam := mkNS("team", "env", "prod")
	nsOther := mkNS("other", "env", "dev")
	podA := func() *policyapi.Pod { return mkPod("team", "a", ips("10.0.0.1", "fd00::1"), "app", "a") }
	podB := mkPod("team", "b", ips("10.0.0.2"), "app", "b")
	podC := mkPod("team", "c", ips("10.0.0.3"), "app", "c")
	podOB := mkPod("other", "b", ips("10.0.1.2"), "app", "b")
	podOX := mkPod("other", "x", ips("10.0.1.3"), "app", "x")
	base := []*policyapi.Pod{podA(), podB, podC, podOB, podOX}
	ingressFrom := func(ports []policyapi.NetworkPolicyPort, peers ...policyapi.NetworkPolicyPeer) policyapi.NetworkPolicySpec {
		return policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: ports, From: peers}}}
	}
	egressTo := func(ports []policyapi.NetworkPolicyPort, peers ...policyapi.NetworkPolicyPeer) policyapi.NetworkPolicySpec {
		return policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Egress: []policyapi.EgressRule{{Ports: ports, To: peers}}}
	}
	ports := func(p ...policyapi.NetworkPolicyPort) []policyapi.NetworkPolicyPort { return p }
	selectA := sel("app", "a")

	for _, tc := range []struct {
		name            string
		pods            []*policyapi.Pod // default: base
		policies        []*policyapi.NetworkPolicy
		ingress, egress bool // isolated
		want            []rule
	}{
		{name: "no policy: not isolated"},
		{
			name:     "policy selecting other pods does not isolate",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", sel("app", "b"), policyapi.NetworkPolicySpec{})},
		},
		{
			name:     "policy in another namespace does not isolate",
			policies: []*policyapi.NetworkPolicy{mkPolicy("other", "p", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{})},
		},
		{
			name:     "empty podSelector selects every pod of its namespace: deny all ingress",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "deny", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{})},
			ingress:  true,
		},
		{
			name: "deny all egress: policyType Egress with an empty list",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "deny", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Egress: []policyapi.EgressRule{}})},
			egress: true,
		},
		{
			name: "egress rules without policyTypes isolate both directions",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, policyapi.NetworkPolicySpec{
				Egress: []policyapi.EgressRule{{Ports: ports(tcp(53))}}})},
			ingress: true, egress: true,
			want: []rule{{"any", policyapi.Egress, policyapi.ProtoTCP, r1(53, 53)}},
		},
		{
			name: "policyTypes Egress ignores ingress rules",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, policyapi.NetworkPolicySpec{
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
				Ingress:     []policyapi.IngressRule{{Ports: ports(tcp(80))}}})},
			egress: true,
		},
		{
			name:     "podSelector peer: pods of the policy's namespace only",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "b")}))},
			ingress:  true,
			want:     []rule{{"team/b", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name:     "namespaceSelector peer: every pod of matching namespaces",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)), policyapi.NetworkPolicyPeer{NamespaceSelector: sel("env", "dev")}))},
			ingress:  true,
			want:     []rule{{"other/b", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}, {"other/x", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name: "both selectors in one peer: AND",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)),
				policyapi.NetworkPolicyPeer{NamespaceSelector: &policyapi.LabelSelector{}, PodSelector: sel("app", "b")}))},
			ingress: true,
			want:    []rule{{"team/b", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}, {"other/b", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name: "selectors in two peers: OR",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)),
				policyapi.NetworkPolicyPeer{NamespaceSelector: sel("env", "dev")}, policyapi.NetworkPolicyPeer{PodSelector: sel("app", "c")}))},
			ingress: true,
			want: []rule{{"other/b", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}, {"other/x", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)},
				{"team/c", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name: "namespace without object matches on its name label",
			pods: append(slices.Clone(base), mkPod("lonely", "l", ips("10.0.2.1"), "app", "l")),
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)),
				policyapi.NetworkPolicyPeer{NamespaceSelector: sel(policyapi.NamespaceNameLabel, "lonely")}))},
			ingress: true,
			want:    []rule{{"lonely/l", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name: "namespace object without the name label still matches on it",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)),
				policyapi.NetworkPolicyPeer{NamespaceSelector: sel(policyapi.NamespaceNameLabel, "other"), PodSelector: sel("app", "x")}))},
			ingress: true,
			want:    []rule{{"other/x", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name:     "empty from: any peer",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(443))))},
			ingress:  true,
			want:     []rule{{"any", policyapi.Ingress, policyapi.ProtoTCP, r1(443, 443)}},
		},
		{
			name:     "no ports: every port of every protocol, and portless protocols",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(nil, policyapi.NetworkPolicyPeer{PodSelector: sel("app", "b")}))},
			ingress:  true,
			want:     allOf("team/b", policyapi.Ingress),
		},
		{
			name:     "empty rule: everything from everyone",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{}}})},
			ingress:  true,
			want:     allOf("any", policyapi.Ingress),
		},
		{
			name:     "protocol without port: every port of that protocol",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(policyapi.NetworkPolicyPort{Protocol: ptr(policyapi.UDP)})))},
			ingress:  true,
			want:     []rule{{"any", policyapi.Ingress, policyapi.ProtoUDP, r1(0, 65535)}},
		},
		{
			name: "UDP and SCTP ports",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(
				policyapi.NetworkPolicyPort{Protocol: ptr(policyapi.UDP), Port: policyapi.FromInt(53)}, policyapi.NetworkPolicyPort{Protocol: ptr(policyapi.SCTP), Port: policyapi.FromInt(9000)})))},
			ingress: true,
			want:    []rule{{"any", policyapi.Ingress, policyapi.ProtoUDP, r1(53, 53)}, {"any", policyapi.Ingress, policyapi.ProtoSCTP, r1(9000, 9000)}},
		},
		{
			name: "endPort ranges merge with overlapping and adjacent ports",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(
				policyapi.NetworkPolicyPort{Port: policyapi.FromInt(1000), EndPort: ptr[int32](2000)}, tcp(2001), tcp(1500), tcp(80), tcp(82))))},
			ingress: true,
			want:    []rule{{"any", policyapi.Ingress, policyapi.ProtoTCP, []PortRange{{80, 80}, {82, 82}, {1000, 2001}}}},
		},
		{
			name: "multiple policies are a union",
			policies: []*policyapi.NetworkPolicy{
				mkPolicy("team", "web", selectA, ingressFrom(ports(tcp(80)), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "b")})),
				mkPolicy("team", "tls", &policyapi.LabelSelector{}, ingressFrom(ports(tcp(443)), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "b")})),
				mkPolicy("team", "out", selectA, egressTo(ports(tcp(5432)), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "c")})),
			},
			ingress: true, egress: true,
			want: []rule{{"team/b", policyapi.Ingress, policyapi.ProtoTCP, []PortRange{{80, 80}, {443, 443}}}, {"team/c", policyapi.Egress, policyapi.ProtoTCP, r1(5432, 5432)}},
		},
		{
			name: "a deny-all policy adds nothing to another's allows",
			policies: []*policyapi.NetworkPolicy{
				mkPolicy("team", "deny", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress}}),
				mkPolicy("team", "web", selectA, ingressFrom(ports(tcp(80)))),
			},
			ingress: true, egress: true,
			want: []rule{{"any", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
		{
			name: "ingress named port resolves against the selected pod",
			pods: []*policyapi.Pod{withPorts(podA(), policyapi.ContainerPort{Name: "http", ContainerPort: 8080}, policyapi.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP}),
				withPorts(mkPod("team", "b", ips("10.0.0.2"), "app", "b"), policyapi.ContainerPort{Name: "http", ContainerPort: 9090})},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(named("http"),
				policyapi.NetworkPolicyPort{Protocol: ptr(policyapi.UDP), Port: policyapi.FromString("dns")}), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "b")}))},
			ingress: true,
			want:    []rule{{"team/b", policyapi.Ingress, policyapi.ProtoTCP, r1(8080, 8080)}, {"team/b", policyapi.Ingress, policyapi.ProtoUDP, r1(53, 53)}},
		},
		{
			name:     "ingress named port: protocol must match too",
			pods:     []*policyapi.Pod{withPorts(podA(), policyapi.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP})},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(named("dns"))))},
			ingress:  true,
		},
		{
			name:     "ingress named port the pod lacks allows nothing",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(named("http"), tcp(22))))},
			ingress:  true,
			want:     []rule{{"any", policyapi.Ingress, policyapi.ProtoTCP, r1(22, 22)}},
		},
		{
			name: "egress named port resolves per destination pod",
			pods: []*policyapi.Pod{podA(),
				withPorts(mkPod("team", "b", ips("10.0.0.2"), "app", "api"), policyapi.ContainerPort{Name: "http", ContainerPort: 8080}),
				withPorts(mkPod("team", "c", ips("10.0.0.3"), "app", "api"), policyapi.ContainerPort{Name: "http", ContainerPort: 9090}),
				withPorts(mkPod("team", "d", ips("10.0.0.4"), "app", "api"), policyapi.ContainerPort{Name: "metrics", ContainerPort: 9100}),
				withPorts(mkPod("team", "e", ips("10.0.0.5"), "app", "api"), policyapi.ContainerPort{Name: "http", ContainerPort: 8080})},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, egressTo(ports(named("http")), policyapi.NetworkPolicyPeer{PodSelector: sel("app", "api")}))},
			egress:   true,
			// b and e share an identity (same labels, same named ports).
			want: []rule{{"team/b", policyapi.Egress, policyapi.ProtoTCP, r1(8080, 8080)}, {"team/c", policyapi.Egress, policyapi.ProtoTCP, r1(9090, 9090)}},
		},
		{
			name: "egress named port to any peer expands to the pods declaring it",
			pods: []*policyapi.Pod{podA(),
				withPorts(mkPod("team", "b", ips("10.0.0.2"), "app", "b"), policyapi.ContainerPort{Name: "http", ContainerPort: 8080}),
				withPorts(mkPod("other", "x", ips("10.0.1.3"), "app", "x"), policyapi.ContainerPort{Name: "http", ContainerPort: 80}),
				mkPod("team", "c", ips("10.0.0.3"), "app", "c")},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, egressTo(ports(named("http"), tcp(53))))},
			egress:   true,
			want: []rule{{"team/b", policyapi.Egress, policyapi.ProtoTCP, r1(8080, 8080)}, {"other/x", policyapi.Egress, policyapi.ProtoTCP, r1(80, 80)},
				{"any", policyapi.Egress, policyapi.ProtoTCP, r1(53, 53)}},
		},
		{
			name: "egress named port to an ipBlock: identities wholly inside it",
			pods: []*policyapi.Pod{podA(),
				withPorts(mkPod("team", "b", ips("10.0.0.2"), "app", "b"), policyapi.ContainerPort{Name: "http", ContainerPort: 8080}),
				withPorts(mkPod("other", "x", ips("10.0.1.3"), "app", "x"), policyapi.ContainerPort{Name: "http", ContainerPort: 80}),
				// y1 and y2 share an identity, one inside the block and one not.
				withPorts(mkPod("team", "y1", ips("10.0.0.9"), "app", "y"), policyapi.ContainerPort{Name: "http", ContainerPort: 81}),
				withPorts(mkPod("team", "y2", ips("10.0.1.9"), "app", "y"), policyapi.ContainerPort{Name: "http", ContainerPort: 81}),
				// ghost's only address belongs to the local endpoint: it has no
				// address in the block, so it is not in scope either.
				withPorts(mkPod("team", "ghost", ips("10.0.0.1"), "app", "ghost"), policyapi.ContainerPort{Name: "http", ContainerPort: 82})},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, egressTo(ports(named("http")),
				policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/24"}}))},
			egress: true,
			want:   []rule{{"team/b", policyapi.Egress, policyapi.ProtoTCP, r1(8080, 8080)}},
		},
		{
			name: "ipBlock peer keys rules by the classes inside the block",
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, egressTo(ports(tcp(443)),
				policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}}))},
			egress: true,
			want:   []rule{{"class1", policyapi.Egress, policyapi.ProtoTCP, r1(443, 443)}},
		},
		{
			name: "overlapping ipBlocks: a class per combination",
			policies: []*policyapi.NetworkPolicy{
				mkPolicy("team", "wide", selectA, egressTo(ports(tcp(80)), policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/8"}})),
				mkPolicy("team", "narrow", selectA, egressTo(ports(tcp(443)), policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "10.1.0.0/16"}})),
			},
			egress: true,
			// Blocks sorted by key: 10.0.0.0/8 (0), 10.1.0.0/16 (1). Sets {0} and
			// {0,1}: sorted [0] < [0 1], so class1 = {wide}, class2 = {wide, narrow}.
			want: []rule{{"class1", policyapi.Egress, policyapi.ProtoTCP, r1(80, 80)},
				{"class2", policyapi.Egress, policyapi.ProtoTCP, []PortRange{{80, 80}, {443, 443}}}},
		},
		{
			name: "IPv6 selector peers and blocks",
			pods: []*policyapi.Pod{podA(), mkPod("team", "v6", ips("fd00::2"), "app", "v6")},
			policies: []*policyapi.NetworkPolicy{mkPolicy("team", "p", selectA, ingressFrom(ports(tcp(80)),
				policyapi.NetworkPolicyPeer{PodSelector: sel("app", "v6")}, policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: "2001:db8::/32"}}))},
			ingress: true,
			want:    []rule{{"team/v6", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}, {"class1", policyapi.Ingress, policyapi.ProtoTCP, r1(80, 80)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := tc.pods
			if pods == nil {
				pods = base
			}
			sc := scenario{namespaces: []*policyapi.Namespace{nsTeam, nsOther}, pods: pods, policies: tc.policies, local: localA}
			s := sc.snapshot()
			d, err := Compile(s)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			ep := d.Endpoints["lxc-a"]
			if ep == nil {
				t.Fatal("no endpoint lxc-a")
			}
			if ep.IngressIsolated != tc.ingress || ep.EgressIsolated != tc.egress {
				t.Errorf("isolated ingress %v egress %v, want %v %v", ep.IngressIsolated, ep.EgressIsolated, tc.ingress, tc.egress)
			}
			want := sc.resolve(t, s, tc.want)
			if !reflect.DeepEqual(ep.Rules, want) {
				t.Errorf("rules:\n%s\nwant:\n%s", describe(t, s, ep.Rules), describe(t, s, want))
			}
		})
	}
}
func ptr[T any](v T) *T { return &v }
