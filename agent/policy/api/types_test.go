package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestSelectorMatches(t *testing.T) {
	labels := map[string]string{"app": "web", "tier": "front", "empty": ""}
	req := func(key string, op LabelSelectorOperator, vals ...string) LabelSelectorRequirement {
		return LabelSelectorRequirement{Key: key, Operator: op, Values: vals}
	}
	for _, tc := range []struct {
		name string
		sel  *LabelSelector
		want bool
	}{
		{"nil matches nothing", nil, false},
		{"empty matches all", &LabelSelector{}, true},
		{"matchLabels hit", &LabelSelector{MatchLabels: map[string]string{"app": "web"}}, true},
		{"matchLabels miss value", &LabelSelector{MatchLabels: map[string]string{"app": "db"}}, false},
		{"matchLabels miss key", &LabelSelector{MatchLabels: map[string]string{"x": "web"}}, false},
		{"matchLabels empty value", &LabelSelector{MatchLabels: map[string]string{"empty": ""}}, true},
		{"matchLabels all must hold", &LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "back"}}, false},
		{"In hit", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("app", OpIn, "db", "web")}}, true},
		{"In miss", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("app", OpIn, "db")}}, false},
		{"In missing key", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("x", OpIn, "web")}}, false},
		{"NotIn hit", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("app", OpNotIn, "db")}}, true},
		{"NotIn miss", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("app", OpNotIn, "web")}}, false},
		{"NotIn missing key is true", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("x", OpNotIn, "web")}}, true},
		{"Exists", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("tier", OpExists)}}, true},
		{"Exists empty value", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("empty", OpExists)}}, true},
		{"Exists missing", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("x", OpExists)}}, false},
		{"DoesNotExist", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("x", OpDoesNotExist)}}, true},
		{"DoesNotExist present", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("app", OpDoesNotExist)}}, false},
		{"labels AND expressions both hold", &LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []LabelSelectorRequirement{req("tier", OpIn, "front")},
		}, true},
		{"labels AND expressions one fails", &LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []LabelSelectorRequirement{req("tier", OpNotIn, "front")},
		}, false},
		{"prefixed key", &LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("example.com/x", OpDoesNotExist)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sel.Matches(labels)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSelectorInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  LabelSelector
		want string
	}{
		{"unknown operator", LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: "Equals", Values: []string{"x"}}}}, "unknown operator"},
		{"Exists with values", LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: OpExists, Values: []string{"x"}}}}, "takes no values"},
		{"DoesNotExist with values", LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: OpDoesNotExist, Values: []string{"x"}}}}, "takes no values"},
		{"In without values", LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: OpIn}}}, "at least one value"},
		{"NotIn without values", LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: OpNotIn}}}, "at least one value"},
		{"bad key", LabelSelector{MatchLabels: map[string]string{"-a": "x"}}, "label key"},
		{"bad key prefix", LabelSelector{MatchLabels: map[string]string{"Ex_ample/a": "x"}}, "prefix"},
		{"bad value", LabelSelector{MatchLabels: map[string]string{"a": "x y"}}, "label value"},
		{"long value", LabelSelector{MatchLabels: map[string]string{"a": strings.Repeat("v", 64)}}, "label value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.sel.Matches(nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSelectorKeyCanonical(t *testing.T) {
	a, err := ParseSelector(&LabelSelector{
		MatchLabels:      map[string]string{"a": "1", "b": "2"},
		MatchExpressions: []LabelSelectorRequirement{{Key: "c", Operator: OpIn, Values: []string{"y", "x", "y"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseSelector(&LabelSelector{
		MatchExpressions: []LabelSelectorRequirement{
			{Key: "c", Operator: OpIn, Values: []string{"x", "y"}},
			{Key: "b", Operator: OpIn, Values: []string{"2"}},
		},
		MatchLabels: map[string]string{"a": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != b.Key() {
		t.Errorf("equivalent selectors have keys %q and %q", a.Key(), b.Key())
	}
}

func ptr[T any](v T) *T { return &v }

func TestPolicyDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec NetworkPolicySpec
		want []PolicyType
	}{
		{"no rules", NetworkPolicySpec{}, []PolicyType{PolicyTypeIngress}},
		{"ingress rules", NetworkPolicySpec{Ingress: []IngressRule{{}}}, []PolicyType{PolicyTypeIngress}},
		{"egress rules add Egress", NetworkPolicySpec{Egress: []EgressRule{{}}}, []PolicyType{PolicyTypeIngress, PolicyTypeEgress}},
		{"empty egress list does not", NetworkPolicySpec{Egress: []EgressRule{}}, []PolicyType{PolicyTypeIngress}},
		{"explicit kept", NetworkPolicySpec{PolicyTypes: []PolicyType{PolicyTypeEgress}, Ingress: []IngressRule{{}}}, []PolicyType{PolicyTypeEgress}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &NetworkPolicy{Spec: tc.spec}
			p.Default()
			if !reflect.DeepEqual(p.Spec.PolicyTypes, tc.want) {
				t.Errorf("PolicyTypes = %v, want %v", p.Spec.PolicyTypes, tc.want)
			}
		})
	}
	p := &NetworkPolicy{Spec: NetworkPolicySpec{
		Ingress: []IngressRule{{Ports: []NetworkPolicyPort{{Port: FromInt(80)}, {Protocol: ptr(UDP)}}}},
		Egress:  []EgressRule{{Ports: []NetworkPolicyPort{{Port: FromString("dns")}}}},
	}}
	p.Default()
	if got := *p.Spec.Ingress[0].Ports[0].Protocol; got != TCP {
		t.Errorf("ingress port protocol = %s, want TCP", got)
	}
	if got := *p.Spec.Ingress[0].Ports[1].Protocol; got != UDP {
		t.Errorf("explicit UDP became %s", got)
	}
	if got := *p.Spec.Egress[0].Ports[0].Protocol; got != TCP {
		t.Errorf("egress port protocol = %s, want TCP", got)
	}
}

func TestPolicyValidate(t *testing.T) {
	ingressPort := func(port NetworkPolicyPort) NetworkPolicySpec {
		return NetworkPolicySpec{Ingress: []IngressRule{{Ports: []NetworkPolicyPort{port}}}}
	}
	from := func(peer NetworkPolicyPeer) NetworkPolicySpec {
		return NetworkPolicySpec{Ingress: []IngressRule{{From: []NetworkPolicyPeer{peer}}}}
	}
	block := func(cidr string, except ...string) NetworkPolicySpec {
		return from(NetworkPolicyPeer{IPBlock: &IPBlock{CIDR: cidr, Except: except}})
	}
	for _, tc := range []struct {
		name string
		spec NetworkPolicySpec
		want string // "" = valid
	}{
		{"empty", NetworkPolicySpec{}, ""},
		{"port", ingressPort(NetworkPolicyPort{Port: FromInt(80)}), ""},
		{"range", ingressPort(NetworkPolicyPort{Port: FromInt(80), EndPort: ptr[int32](90)}), ""},
		{"range of one", ingressPort(NetworkPolicyPort{Port: FromInt(80), EndPort: ptr[int32](80)}), ""},
		{"named", ingressPort(NetworkPolicyPort{Port: FromString("http-alt")}), ""},
		{"sctp", ingressPort(NetworkPolicyPort{Protocol: ptr(SCTP)}), ""},
		{"ipv6 block", block("2001:db8::/32", "2001:db8:1::/48"), ""},
		{"host bits allowed", block("10.0.0.1/8"), ""},
		{"both selectors", from(NetworkPolicyPeer{PodSelector: &LabelSelector{}, NamespaceSelector: &LabelSelector{}}), ""},
		{"port zero", ingressPort(NetworkPolicyPort{Port: FromInt(0)}), "port 0 out of range"},
		{"port too big", ingressPort(NetworkPolicyPort{Port: FromInt(65536)}), "port 65536 out of range"},
		{"endPort too big", ingressPort(NetworkPolicyPort{Port: FromInt(80), EndPort: ptr[int32](70000)}), "endPort 70000 out of range"},
		{"endPort below port", ingressPort(NetworkPolicyPort{Port: FromInt(80), EndPort: ptr[int32](79)}), "endPort 79 is less than port 80"},
		{"endPort without port", ingressPort(NetworkPolicyPort{EndPort: ptr[int32](80)}), "endPort may not be specified when port is not"},
		{"endPort with named port", ingressPort(NetworkPolicyPort{Port: FromString("http"), EndPort: ptr[int32](80)}), "is named"},
		{"bad port name", ingressPort(NetworkPolicyPort{Port: FromString("80")}), "invalid port name"},
		{"port name too long", ingressPort(NetworkPolicyPort{Port: FromString("abcdefghijklmnop")}), "invalid port name"},
		{"unknown protocol", ingressPort(NetworkPolicyPort{Protocol: ptr(Protocol("ICMP"))}), `unknown protocol "ICMP"`},
		{"lower-case protocol", ingressPort(NetworkPolicyPort{Protocol: ptr(Protocol("tcp"))}), "unknown protocol"},
		{"bad cidr", block("10.0.0.0/33"), "spec.ingress[0]: from[0]: ipBlock: cidr"},
		{"bad except", block("10.0.0.0/8", "nope"), "except[0]"},
		{"except outside", block("10.0.0.0/8", "11.0.0.0/16"), "not a strict subset"},
		{"except equal", block("10.0.0.0/8", "10.0.0.0/8"), "not a strict subset"},
		{"except other family", block("10.0.0.0/8", "::/64"), "not a strict subset"},
		{"ipBlock and selector", from(NetworkPolicyPeer{IPBlock: &IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: &LabelSelector{}}), "may not be combined"},
		{"empty peer", from(NetworkPolicyPeer{}), "must specify"},
		{"bad pod selector", NetworkPolicySpec{PodSelector: LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: "Is"}}}}, "spec.podSelector: matchExpressions[0]: unknown operator"},
		{"bad peer selector", from(NetworkPolicyPeer{NamespaceSelector: &LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: OpExists, Values: []string{"b"}}}}}), "namespaceSelector"},
		{"bad egress", NetworkPolicySpec{Egress: []EgressRule{{To: []NetworkPolicyPeer{{}}}}}, "spec.egress[0]: to[0]"},
		{"unknown policy type", NetworkPolicySpec{PolicyTypes: []PolicyType{"Both"}}, "unknown policy type"},
		{"duplicate policy type", NetworkPolicySpec{PolicyTypes: []PolicyType{"Egress", "Egress"}}, "duplicate policy type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &NetworkPolicy{ObjectMeta: ObjectMeta{Name: "np", Namespace: "team"}, Spec: tc.spec}
			err := p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "networkpolicy team/np: ") {
				t.Errorf("err = %q, want it to name team/np and contain %q", err, tc.want)
			}
		})
	}
}

func TestIntOrStringJSON(t *testing.T) {
	var p NetworkPolicyPort
	if err := json.Unmarshal([]byte(`{"port": 8080, "endPort": 8090}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Port.IsString || p.Port.IntVal != 8080 || *p.EndPort != 8090 {
		t.Errorf("numeric port parsed as %+v", p.Port)
	}
	if err := json.Unmarshal([]byte(`{"port": "http"}`), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Port.IsString || p.Port.StrVal != "http" {
		t.Errorf("named port parsed as %+v", p.Port)
	}
	for _, bad := range []string{`{"port": 1.5}`, `{"port": true}`, `{"port": 99999999999}`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
	out, err := json.Marshal([]*IntOrString{FromInt(53), FromString("dns")})
	if err != nil || string(out) != `[53,"dns"]` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
}

func TestIdentityKey(t *testing.T) {
	pod := func(name string, labels map[string]string, ports ...ContainerPort) *Pod {
		return &Pod{
			ObjectMeta: ObjectMeta{Name: name, Namespace: "team", Labels: labels},
			Spec:       PodSpec{Containers: []Container{{Name: "c", Ports: ports}}},
		}
	}
	web := map[string]string{"app": "web", "v": "1"}
	base := IdentityKey(nil, pod("a", web))
	same := []struct {
		name string
		key  string
	}{
		{"other pod name", IdentityKey(nil, pod("b", map[string]string{"v": "1", "app": "web"}))},
		{"namespace object with the name label only", IdentityKey(&Namespace{ObjectMeta: ObjectMeta{Name: "team"}}, pod("a", web))},
		{"unnamed ports ignored", IdentityKey(nil, pod("a", web, ContainerPort{ContainerPort: 80}))},
	}
	for _, s := range same {
		if s.key != base {
			t.Errorf("%s: key %q differs from %q", s.name, s.key, base)
		}
	}
	differ := []struct {
		name string
		key  string
	}{
		{"other labels", IdentityKey(nil, pod("a", map[string]string{"app": "web"}))},
		{"namespace labels", IdentityKey(&Namespace{ObjectMeta: ObjectMeta{Name: "team", Labels: map[string]string{"env": "prod"}}}, pod("a", web))},
		{"named port", IdentityKey(nil, pod("a", web, ContainerPort{Name: "http", ContainerPort: 80}))},
		{"other namespace", IdentityKey(nil, &Pod{ObjectMeta: ObjectMeta{Name: "a", Namespace: "other", Labels: web}})},
	}
	for _, d := range differ {
		if d.key == base {
			t.Errorf("%s: key equals the base key %q", d.name, base)
		}
	}
	p80 := IdentityKey(nil, pod("a", web, ContainerPort{Name: "http", ContainerPort: 80}))
	p81 := IdentityKey(nil, pod("a", web, ContainerPort{Name: "http", ContainerPort: 81}))
	pUDP := IdentityKey(nil, pod("a", web, ContainerPort{Name: "http", ContainerPort: 80, Protocol: UDP}))
	pTCP := IdentityKey(nil, pod("a", web, ContainerPort{Name: "http", ContainerPort: 80, Protocol: TCP}))
	if p80 == p81 || p80 == pUDP || p80 != pTCP {
		t.Errorf("named port keys: 80 %q, 81 %q, UDP %q, explicit TCP %q", p80, p81, pUDP, pTCP)
	}
	// A label value with the key syntax in it must not collide.
	k1 := IdentityKey(nil, pod("a", map[string]string{"a": `1","b":"2`}))
	k2 := IdentityKey(nil, pod("a", map[string]string{"a": "1", "b": "2"}))
	if k1 == k2 {
		t.Errorf("injected label collides: %q", k1)
	}
}
