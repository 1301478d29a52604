package policy

import (
	"net/netip"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestCompileServicesExternalFrontends: the frontends kube-proxy also
// translates for a node's pods (externalIPs, load-balancer IPs of ipMode
// VIP, NodePorts on the node's addresses) are translated too, to every
// ready endpoint, marked External (masqueraded), for the families the
// Service has a ClusterIP of; none with externalTrafficPolicy Local, for
// load-balancer IPs guarded by source ranges, for a headless Service or
// one of another proxy; a ClusterIP keeps its frontend against another
// Service's externalIP. Compile and the incremental compiler agree.
func TestCompileServicesExternalFrontends(t *testing.T) {
	v4 := []string{"10.96.0.10"}
	nodeAddrs := []netip.Addr{netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("fd00:1::11")}
	slice := func(svc string, eps ...policyapi.SliceEndpoint) *policyapi.EndpointSlice {
		return mkSlice("prod", svc+"-4", svc, policyapi.AddressTypeIPv4, []string{":8080"}, eps...)
	}
	svc := func(name string, typ policyapi.ServiceType, clusterIPs []string, edit func(*policyapi.Service)) *policyapi.Service {
		s := mkService("prod", name, clusterIPs, ":80")
		s.Spec.Type = typ
		if typ == policyapi.ServiceTypeNodePort || typ == policyapi.ServiceTypeLoadBalancer {
			s.Spec.Ports[0].NodePort = 30080
		}
		if edit != nil {
			edit(s)
		}
		return s
	}
	lbIPs := func(s *policyapi.Service, modes ...string) {
		for i, m := range modes {
			in := policyapi.LoadBalancerIngress{IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(20 + i)}).String()}
			if m != "" {
				mode := policyapi.LoadBalancerIPMode(m)
				in.IPMode = &mode
			}
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, in)
		}
	}
	all := be("10.0.0.1:8080", "10.0.0.2:8080")
	web := slice("web", on(ep("10.0.0.1"), "n1"), on(ep("10.0.0.2"), "n2"))
	clusterIP := fe("10.96.0.10", 80, policyapi.ProtoTCP)
	ext := func(svc string, b []ServiceBackend) *ServiceEntry {
		return &ServiceEntry{Service: "prod/" + svc, Backends: b, External: true}
	}
	tests := []struct {
		name   string
		svcs   []*policyapi.Service
		slices []*policyapi.EndpointSlice
		want   map[ServiceFrontend]*ServiceEntry
	}{
		{
			name: "NodePort with externalIPs: each of its family, and the node's addresses of it",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeNodePort, v4, func(s *policyapi.Service) {
				s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1", "::ffff:192.0.2.2", "192.0.2.1"}
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                                     {Service: "prod/web", Backends: all},
				fe("192.0.2.1", 80, policyapi.ProtoTCP):       ext("web", all),
				fe("192.0.2.2", 80, policyapi.ProtoTCP):       ext("web", all),
				fe("192.168.0.11", 30080, policyapi.ProtoTCP): ext("web", all),
			},
		},
		{
			name: "LoadBalancer: its VIP addresses, not those a proxy load balancer serves",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeLoadBalancer, []string{"10.96.0.10", "fd00:96::10"}, func(s *policyapi.Service) {
				lbIPs(s, "", "VIP", "Proxy")
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, policyapi.LoadBalancerIngress{IP: "not-an-address"})
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP: {Service: "prod/web", Backends: all},
				fe("fd00:96::10", 80, policyapi.ProtoTCP):     {Service: "prod/web"},
				fe("198.51.100.20", 80, policyapi.ProtoTCP):   ext("web", all),
				fe("198.51.100.21", 80, policyapi.ProtoTCP):   ext("web", all),
				fe("192.168.0.11", 30080, policyapi.ProtoTCP): ext("web", all),
				fe("fd00:1::11", 30080, policyapi.ProtoTCP):   ext("web", nil),
			},
		},
		{
			name: "loadBalancerSourceRanges: the load-balancer IPs stay kube-proxy's, the rest is translated",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeLoadBalancer, v4, func(s *policyapi.Service) {
				lbIPs(s, "")
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
				s.Spec.ExternalIPs = []string{"192.0.2.1"}
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                                     {Service: "prod/web", Backends: all},
				fe("192.0.2.1", 80, policyapi.ProtoTCP):       ext("web", all),
				fe("192.168.0.11", 30080, policyapi.ProtoTCP): ext("web", all),
			},
		},
		{
			name: "externalTrafficPolicy Local: only the ClusterIP",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeLoadBalancer, v4, func(s *policyapi.Service) {
				lbIPs(s, "")
				s.Spec.ExternalIPs = []string{"192.0.2.1"}
				s.Spec.ExternalTrafficPolicy = policyapi.ServiceExternalTrafficPolicyLocal
			})},
			slices: []*policyapi.EndpointSlice{web},
			want:   map[ServiceFrontend]*ServiceEntry{clusterIP: {Service: "prod/web", Backends: all}},
		},
		{
			name: "internalTrafficPolicy Local narrows the ClusterIP, not the external frontends",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeNodePort, v4, func(s *policyapi.Service) {
				local := policyapi.ServiceInternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = &local
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP: {Service: "prod/web", Backends: be("10.0.0.1:8080")},
				fe("192.168.0.11", 30080, policyapi.ProtoTCP): ext("web", all),
			},
		},
		{
			name: "a ClusterIP Service's nodePort means nothing; a headless one's or another proxy's externalIPs neither",
			svcs: []*policyapi.Service{
				svc("web", policyapi.ServiceTypeClusterIP, v4, func(s *policyapi.Service) { s.Spec.Ports[0].NodePort = 30080 }),
				svc("headless", policyapi.ServiceTypeClusterIP, []string{policyapi.ClusterIPNone}, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }),
				svc("proxied", policyapi.ServiceTypeNodePort, []string{"10.96.0.11"}, func(s *policyapi.Service) {
					s.Spec.ExternalIPs = []string{"192.0.2.2"}
					s.Labels = map[string]string{policyapi.ServiceProxyNameLabel: "other"}
				}),
			},
			slices: []*policyapi.EndpointSlice{web},
			want:   map[ServiceFrontend]*ServiceEntry{clusterIP: {Service: "prod/web", Backends: all}},
		},
		{
			name: "an externalIP cannot take another Service's ClusterIP; two externalIPs go to the first by name",
			svcs: []*policyapi.Service{
				svc("web", policyapi.ServiceTypeClusterIP, v4, nil),
				svc("a-hijack", policyapi.ServiceTypeClusterIP, []string{"10.96.0.11"}, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"10.96.0.10", "192.0.2.1"} }),
				svc("b-other", policyapi.ServiceTypeClusterIP, []string{"10.96.0.12"}, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }),
			},
			slices: []*policyapi.EndpointSlice{web, slice("a-hijack", ep("10.0.0.9"))},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                                {Service: "prod/web", Backends: all},
				fe("10.96.0.11", 80, policyapi.ProtoTCP): {Service: "prod/a-hijack", Backends: be("10.0.0.9:8080")},
				fe("10.96.0.12", 80, policyapi.ProtoTCP): {Service: "prod/b-other"},
				fe("192.0.2.1", 80, policyapi.ProtoTCP):  ext("a-hijack", be("10.0.0.9:8080")),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkServicesBothWays(t, &Snapshot{Services: tc.svcs, EndpointSlices: tc.slices, Node: "n1", NodeAddrs: nodeAddrs}, tc.want)
		})
	}
}
