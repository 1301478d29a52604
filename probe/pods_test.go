package probe

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func kpod(ns, name string, ports ...policyapi.ContainerPort) policyapi.Pod {
	p := policyapi.Pod{}
	p.Namespace, p.Name = ns, name
	p.Spec.Containers = []policyapi.Container{{Name: "c", Ports: ports}}
	return p
}

func TestFromPolicyPods(t *testing.T) {
	a := kpod("x", "a", policyapi.ContainerPort{ContainerPort: 80}, policyapi.ContainerPort{ContainerPort: 53, Protocol: policyapi.UDP}, policyapi.ContainerPort{ContainerPort: 80, Protocol: policyapi.TCP})
	a.Annotations = map[string]string{IPAnnotation: "10.244.1.5"}
	host := kpod("x", "host", policyapi.ContainerPort{ContainerPort: 80})
	host.Spec.HostNetwork = true
	pods, skipped, err := FromPolicyPods([]policyapi.Pod{a, host})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(skipped, []string{"x/host"}) {
		t.Errorf("skipped %v, want [x/host]", skipped)
	}
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	if want := []Port{{80, TCP}, {53, UDP}}; !slices.Equal(pods[0].Ports, want) {
		t.Errorf("ports %v, want %v (protocol defaults to TCP, duplicates dropped)", pods[0].Ports, want)
	}
	if pods[0].WantIPs[0] != netip.MustParseAddr("10.244.1.5") {
		t.Errorf("WantIPs %v, want 10.244.1.5 first", pods[0].WantIPs)
	}

	for name, bad := range map[string]policyapi.Pod{
		"bad protocol": kpod("x", "a", policyapi.ContainerPort{ContainerPort: 80, Protocol: "ICMP"}),
		"bad port":     kpod("x", "a", policyapi.ContainerPort{ContainerPort: 70000}),
		"bad address": func() policyapi.Pod {
			p := kpod("x", "a")
			p.Annotations = map[string]string{IPAnnotation: "10.244.1"}
			return p
		}(),
	} {
		if _, _, err := FromPolicyPods([]policyapi.Pod{bad}); err == nil || !strings.Contains(err.Error(), "x/a") {
			t.Errorf("%s: error %v, want one naming x/a", name, err)
		}
	}
}
