package probe

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		answered, refused, dropped int
		want                       Outcome
	}{
		{16, 0, 0, OutcomeAllowed},
		{1, 0, 0, OutcomeAllowed},
		{0, 0, 16, OutcomeDenied},
		{0, 16, 0, OutcomeRefused},
		// Refused and dropped, none answered: the refusals of the
		// others were rate-limited, as ICMP errors are.
		{0, 3, 13, OutcomeRefused},
		{0, 1, 15, OutcomeRefused},
		{1, 0, 1, OutcomePartial},
		{1, 1, 0, OutcomePartial},
		{9, 3, 4, OutcomePartial},
		{0, 0, 0, OutcomeUnprobeable},
	} {
		if got := decide(tc.answered, tc.refused, tc.dropped); got != tc.want {
			t.Errorf("decide(answered %d, refused %d, dropped %d) = %s, want %s", tc.answered, tc.refused, tc.dropped, got, tc.want)
		}
	}
}

func TestOutcomeCells(t *testing.T) {
	want := map[Outcome]byte{OutcomeAllowed: '.', OutcomeDenied: 'X', OutcomePartial: '~', OutcomeRefused: 'R', OutcomeUnprobeable: '?', "": '?'}
	for o, c := range want {
		if got := o.Cell(); got != c {
			t.Errorf("%q.Cell() = %c, want %c", o, got, c)
		}
	}
}

func ksvc(ns, name string, ips []string, ports ...policyapi.ServicePort) policyapi.Service {
	s := policyapi.Service{}
	s.Namespace, s.Name = ns, name
	s.Spec.ClusterIPs = ips
	if len(ips) > 0 {
		s.Spec.ClusterIP = ips[0]
	}
	s.Spec.Ports = ports
	return s
}

func TestFromPolicyServices(t *testing.T) {
	dual := ksvc("x", "web", []string{"10.96.0.1", "fd00:10:96::1"},
		policyapi.ServicePort{Port: 80}, policyapi.ServicePort{Port: 53, Protocol: policyapi.UDP}, policyapi.ServicePort{Port: 80, Protocol: policyapi.TCP})
	dual.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
	v6first := ksvc("", "six", []string{"fd00:10:96::2", "10.96.0.2"}, policyapi.ServicePort{Port: 443})
	headless := ksvc("x", "headless", []string{policyapi.ClusterIPNone}, policyapi.ServicePort{Port: 80})
	external := ksvc("x", "ext", nil)
	external.Spec.Type = policyapi.ServiceTypeExternalName
	other := ksvc("x", "mesh", []string{"10.96.0.3"}, policyapi.ServicePort{Port: 80})
	other.Labels = map[string]string{policyapi.ServiceProxyNameLabel: ""}
	svcs, skipped, err := FromPolicyServices([]policyapi.Service{dual, v6first, headless, external, other})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(skipped, []string{"x/headless", "x/ext", "x/mesh"}) {
		t.Errorf("skipped %v, want [x/headless x/ext x/mesh]", skipped)
	}
	if len(svcs) != 2 {
		t.Fatalf("%d services, want 2", len(svcs))
	}
	web, six := svcs[0], svcs[1]
	if web.Key() != "x/web" || !web.Affinity {
		t.Errorf("first service %s (affinity %v), want x/web with affinity", web.Key(), web.Affinity)
	}
	if want := []Port{{80, TCP}, {53, UDP}}; !slices.Equal(web.Ports, want) {
		t.Errorf("ports %v, want %v (protocol defaults to TCP, duplicates dropped)", web.Ports, want)
	}
	if want := [2]netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00:10:96::1")}; web.ClusterIPs != want {
		t.Errorf("ClusterIPs %v, want %v", web.ClusterIPs, want)
	}
	if want := [2]netip.Addr{netip.MustParseAddr("10.96.0.2"), netip.MustParseAddr("fd00:10:96::2")}; six.ClusterIPs != want || six.Key() != "default/six" {
		t.Errorf("%s ClusterIPs %v, want default/six with %v (IPv4 first whatever the order)", six.Key(), six.ClusterIPs, want)
	}

	for name, bad := range map[string]policyapi.Service{
		"bad address":  ksvc("x", "a", []string{"10.96.0"}, policyapi.ServicePort{Port: 80}),
		"bad port":     ksvc("x", "a", []string{"10.96.0.1"}, policyapi.ServicePort{Port: 70000}),
		"bad protocol": ksvc("x", "a", []string{"10.96.0.1"}, policyapi.ServicePort{Port: 80, Protocol: "ICMP"}),
	} {
		if _, _, err := FromPolicyServices([]policyapi.Service{bad}); err == nil || !strings.Contains(err.Error(), "x/a") {
			t.Errorf("%s: error %v, want one naming x/a", name, err)
		}
	}
}
