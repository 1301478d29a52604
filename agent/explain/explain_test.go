package explain

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func pod(ns, name, ip string, labels map[string]string, ports ...policyapi.ContainerPort) *policyapi.Pod {
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	p.Status.PodIP = ip
	p.Spec.Containers = []policyapi.Container{{Name: "c", Ports: ports}}
	return p
}

func np(ns, name string, spec policyapi.NetworkPolicySpec) *policyapi.NetworkPolicy {
	return &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func proto(p policyapi.Protocol) *policyapi.Protocol { return &p }

func tcpPort(n int32) policyapi.NetworkPolicyPort {
	return policyapi.NetworkPolicyPort{Port: policyapi.FromInt(n)}
}

// fixture is a small cluster: namespaces x (team=a) and y (team=b), pods
// x/web (app=web, port "http" 8080/TCP), x/client (app=client), y/db
// (app=db, "http" 9090/TCP), and the policies each case adds.
func fixture(policies ...*policyapi.NetworkPolicy) *policy.Snapshot {
	return &policy.Snapshot{
		Namespaces: map[string]*policyapi.Namespace{
			"x": {ObjectMeta: policyapi.ObjectMeta{Name: "x", Labels: map[string]string{"team": "a"}}},
			"y": {ObjectMeta: policyapi.ObjectMeta{Name: "y", Labels: map[string]string{"team": "b"}}},
		},
		Pods: []*policyapi.Pod{
			pod("x", "web", "10.0.1.1", map[string]string{"app": "web"}, policyapi.ContainerPort{Name: "http", ContainerPort: 8080}),
			pod("x", "client", "10.0.1.2", map[string]string{"app": "client"}),
			pod("y", "db", "10.0.2.1", map[string]string{"app": "db"}, policyapi.ContainerPort{Name: "http", ContainerPort: 9090}),
		},
		Policies: policies,
	}
}

func TestExplain(t *testing.T) {
	webSel := policyapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	denyAll := np("x", "deny-all", policyapi.NetworkPolicySpec{})
	denyEgress := np("x", "deny-egress", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}})
	allowClient80 := np("x", "allow-client", policyapi.NetworkPolicySpec{PodSelector: webSel, Ingress: []policyapi.IngressRule{
		{From: []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}}}}},
		{Ports: []policyapi.NetworkPolicyPort{tcpPort(80)}, From: []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}},
	}})
	for _, tc := range []struct {
		name     string
		policies []*policyapi.NetworkPolicy
		from, to string
		port     string
		verdict  string
		egress   string // the egress side's verdict and the start of its reason
		ingress  string
		allowed  []string // the ingress side's AllowedBy
	}{
		{name: "no policies: not isolated", from: "x/client", to: "x/web", port: "80",
			verdict: Allow, egress: "allow not isolated for egress", ingress: "allow not isolated for ingress"},
		{name: "deny-all ingress: default deny", policies: []*policyapi.NetworkPolicy{denyAll}, from: "x/client", to: "x/web", port: "80",
			verdict: Deny, egress: "allow not isolated", ingress: "deny default deny: x/web is isolated for ingress by x/deny-all"},
		{name: "ingress rule 1 allows", policies: []*policyapi.NetworkPolicy{denyAll, allowClient80}, from: "x/client", to: "x/web", port: "80/tcp",
			verdict: Allow, egress: "allow not isolated", ingress: "allow allowed by x/allow-client ingress[1]", allowed: []string{"x/allow-client ingress[1]"}},
		{name: "ingress rule is TCP only", policies: []*policyapi.NetworkPolicy{allowClient80}, from: "x/client", to: "x/web", port: "80/udp",
			verdict: Deny, egress: "allow not isolated", ingress: "deny default deny"},
		{name: "ingress rule names another port", policies: []*policyapi.NetworkPolicy{allowClient80}, from: "x/client", to: "x/web", port: "81",
			verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "ingress rule names another pod", policies: []*policyapi.NetworkPolicy{allowClient80}, from: "y/db", to: "x/web", port: "80",
			verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "egress type without rules", policies: []*policyapi.NetworkPolicy{denyEgress}, from: "x/client", to: "y/db", port: "80",
			verdict: Deny, egress: "deny default deny: x/client is isolated for egress by x/deny-egress", ingress: "allow not isolated"},
		{name: "egress isolation does not touch ingress", policies: []*policyapi.NetworkPolicy{denyEgress}, from: "y/db", to: "x/client", port: "80",
			verdict: Allow, egress: "allow not isolated", ingress: "allow not isolated"},
		{name: "both sides deny: egress named", policies: []*policyapi.NetworkPolicy{denyEgress, np("y", "deny", policyapi.NetworkPolicySpec{})},
			from: "x/client", to: "y/db", port: "80", verdict: Deny, egress: "deny default deny", ingress: "deny default deny"},
		{name: "egress and ingress both allow", policies: []*policyapi.NetworkPolicy{
			np("x", "to-db", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Egress: []policyapi.EgressRule{
				{To: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}}}}}),
			np("y", "from-x", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{
				{From: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{policyapi.NamespaceNameLabel: "x"}}}}}}}),
		}, from: "x/client", to: "y/db", port: "5432", verdict: Allow, egress: "allow allowed by x/to-db egress[0]", ingress: "allow allowed by y/from-x ingress[0]",
			allowed: []string{"y/from-x ingress[0]"}},
		{name: "namespace selector picks another namespace", policies: []*policyapi.NetworkPolicy{
			np("y", "from-a", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{
				{From: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}}}}}),
		}, from: "x/client", to: "y/db", port: "80", verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "pod and namespace selector: both must match", policies: []*policyapi.NetworkPolicy{
			np("y", "and", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{
				{From: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
					PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}}),
		}, from: "x/client", to: "y/db", port: "80", verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "named port resolves on the destination (ingress)", policies: []*policyapi.NetworkPolicy{
			np("x", "http", policyapi.NetworkPolicySpec{PodSelector: webSel, Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}}}}}),
		}, from: "y/db", to: "x/web", port: "8080", verdict: Allow, egress: "allow", ingress: "allow allowed by x/http ingress[0]", allowed: []string{"x/http ingress[0]"}},
		{name: "named port: another number is denied", policies: []*policyapi.NetworkPolicy{
			np("x", "http", policyapi.NetworkPolicySpec{PodSelector: webSel, Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}}}}}),
		}, from: "y/db", to: "x/web", port: "9090", verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "named port resolves on each destination (egress)", policies: []*policyapi.NetworkPolicy{
			np("x", "out-http", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Egress: []policyapi.EgressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}}}}}),
		}, from: "x/client", to: "y/db", port: "9090", verdict: Allow, egress: "allow allowed by x/out-http egress[0]", ingress: "allow"},
		{name: "named port allows nothing outside the cluster", policies: []*policyapi.NetworkPolicy{
			np("x", "out-http", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Egress: []policyapi.EgressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}}}}}),
		}, from: "x/client", to: "192.0.2.1", port: "9090", verdict: Deny, egress: "deny default deny", ingress: "allow 192.0.2.1 is outside the cluster"},
		{name: "ipBlock with except: inside", policies: []*policyapi.NetworkPolicy{
			np("x", "block", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.2.0/24"}}}}}}}),
		}, from: "x/client", to: "x/web", port: "80", verdict: Allow, egress: "allow", ingress: "allow allowed by x/block ingress[0]", allowed: []string{"x/block ingress[0]"}},
		{name: "ipBlock with except: a pod in the except", policies: []*policyapi.NetworkPolicy{
			np("x", "block", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.2.0/24"}}}}}}}),
		}, from: "y/db", to: "x/web", port: "80", verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "ipBlock: an outside address in the block", policies: []*policyapi.NetworkPolicy{
			np("x", "block", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"192.0.2.128/25"}}}}}}}),
		}, from: "192.0.2.7", to: "x/web", port: "80", verdict: Allow, egress: "allow 192.0.2.7 is outside the cluster", ingress: "allow allowed by x/block ingress[0]", allowed: []string{"x/block ingress[0]"}},
		{name: "ipBlock: a CIDR straddling the except is denied", policies: []*policyapi.NetworkPolicy{
			np("x", "block", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"192.0.2.128/25"}}}}}}}),
		}, from: "192.0.2.0/24", to: "x/web", port: "80", verdict: Deny, egress: "allow", ingress: "deny default deny"},
		{name: "an address of a pod is that pod", policies: []*policyapi.NetworkPolicy{allowClient80}, from: "10.0.1.2", to: "x/web", port: "80",
			verdict: Allow, egress: "allow not isolated", ingress: "allow allowed by x/allow-client ingress[1]", allowed: []string{"x/allow-client ingress[1]"}},
		{name: "policy types Egress only: ingress rules ignored", policies: []*policyapi.NetworkPolicy{
			np("x", "egress-only", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}, Ingress: []policyapi.IngressRule{{}}}),
		}, from: "y/db", to: "x/web", port: "80", verdict: Allow, egress: "allow", ingress: "allow not isolated"},
		{name: "policy types Ingress only: egress rules ignored, egress open", policies: []*policyapi.NetworkPolicy{
			np("x", "ingress-only", policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
				Egress: []policyapi.EgressRule{{Ports: []policyapi.NetworkPolicyPort{tcpPort(1)}}}}),
		}, from: "x/web", to: "y/db", port: "80", verdict: Allow, egress: "allow not isolated", ingress: "allow"},
		{name: "rules of several policies add up", policies: []*policyapi.NetworkPolicy{
			denyAll, allowClient80, np("x", "all-80", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{tcpPort(80)}}}}),
		}, from: "x/client", to: "x/web", port: "80", verdict: Allow, egress: "allow", ingress: "allow allowed by x/all-80 ingress[0] (and 1 more)",
			allowed: []string{"x/all-80 ingress[0]", "x/allow-client ingress[1]"}},
		{name: "end port range", policies: []*policyapi.NetworkPolicy{
			np("x", "range", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Protocol: proto(policyapi.UDP), Port: policyapi.FromInt(1000), EndPort: ptr(int32(2000))}}}}}),
		}, from: "x/client", to: "x/web", port: "2000/UDP", verdict: Allow, egress: "allow", ingress: "allow allowed by x/range ingress[0]", allowed: []string{"x/range ingress[0]"}},
		{name: "an invalid policy fails closed", policies: []*policyapi.NetworkPolicy{
			allowClient80, np("x", "bad", policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Protocol: proto("ICMP")}}}}}),
		}, from: "x/client", to: "x/web", port: "80", verdict: Deny, egress: "allow", ingress: "deny failed closed: x/bad is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := query(t, tc.from, tc.to, tc.port)
			res, err := Explain(fixture(tc.policies...), q)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict {
				t.Errorf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.verdict)
			}
			for _, c := range []struct {
				sd   Side
				want string
			}{{res.Egress, tc.egress}, {res.Ingress, tc.ingress}} {
				if got := c.sd.Verdict + " " + c.sd.Reason; !strings.HasPrefix(got, c.want) {
					t.Errorf("%s: %q, want it to start %q", c.sd.Direction, got, c.want)
				}
				if c.sd.Isolated != (len(c.sd.Policies) > 0) {
					t.Errorf("%s: isolated %v with policies %v", c.sd.Direction, c.sd.Isolated, c.sd.Policies)
				}
			}
			if tc.allowed != nil && !slices.Equal(res.Ingress.AllowedBy, tc.allowed) {
				t.Errorf("ingress allowed by %v, want %v", res.Ingress.AllowedBy, tc.allowed)
			}
			if res.Verdict == Deny && !strings.Contains(res.Reason, "of ") {
				t.Errorf("a denial's reason %q does not name the side", res.Reason)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func query(t *testing.T, from, to, port string) Query {
	t.Helper()
	f, err := ParseEndpoint(from)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseEndpoint(to)
	if err != nil {
		t.Fatal(err)
	}
	n, p, err := ParsePort(port)
	if err != nil {
		t.Fatal(err)
	}
	return Query{From: f, To: d, Port: n, Protocol: p}
}

func TestExplainErrors(t *testing.T) {
	snap := fixture()
	snap.Services = []*policyapi.Service{{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "web"}, Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.10"}}}
	for _, tc := range []struct {
		from, to string
		want     error
		text     string
	}{
		{"x/nobody", "x/web", ErrUnknownPod, "the pods of namespace x are client, web"},
		{"x/client", "z/web", ErrUnknownPod, "the pods of namespace z are none"},
		{"x/client", "10.96.0.10", ErrServiceAddress, "x/web"},
	} {
		_, err := Explain(snap, query(t, tc.from, tc.to, "80"))
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s -> %s: %v, want %v mentioning %q", tc.from, tc.to, err, tc.want, tc.text)
		}
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"web", "x/", "/web", "x/web/1", "10.0.0.1/33", "::ffff:10.0.0.0/104"} {
		if _, err := ParseEndpoint(s); !errors.Is(err, ErrBadQuery) {
			t.Errorf("ParseEndpoint(%q): %v, want ErrBadQuery", s, err)
		}
	}
	e, err := ParseEndpoint("::ffff:10.0.0.1")
	if err != nil || e.Prefix != netip.MustParsePrefix("10.0.0.1/32") {
		t.Errorf("a mapped address reads %v, %v, want 10.0.0.1/32", e.Prefix, err)
	}
	for _, s := range []string{"0", "65536", "80/icmp", "http", "80/"} {
		if _, _, err := ParsePort(s); !errors.Is(err, ErrBadQuery) {
			t.Errorf("ParsePort(%q): %v, want ErrBadQuery", s, err)
		}
	}
	for s, want := range map[string]policyapi.Protocol{"53/udp": policyapi.UDP, "53/SCTP": policyapi.SCTP, "53": policyapi.TCP} {
		if n, p, err := ParsePort(s); err != nil || n != 53 || p != want {
			t.Errorf("ParsePort(%q) = %d, %s, %v; want 53, %s", s, n, p, err, want)
		}
	}
}
