package policy

import (
	"net/netip"
	"reflect"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestCompileServicesExternalFrontends: the frontends kube-proxy also
// translates for a node's pods (externalIPs, load-balancer IPs of ipMode
// VIP, NodePorts on the node's addresses) are translated too, to every
// ready endpoint, marked External (masqueraded), for the families the
// Service has a ClusterIP of; none with externalTrafficPolicy Local, for
// load-balancer IPs guarded by source ranges, for a headless Service, one
// of another proxy, or one with more than MaxExternalFrontends. When
// Services claim one frontend, a ClusterIP wins, then a load-balancer IP
// or NodePort, then an externalIP. Compile and the incremental compiler
// agree.
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
	// lbIPs gives s load-balancer IPs 198.51.100.20 and on, of the modes.
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
	// allExt are all as an external frontend's backends: 10.0.0.1 is on
	// the node compiled for (n1), which masquerades none of its
	// connections.
	allExt := be("10.0.0.1:8080", "10.0.0.2:8080")
	allExt[0].Local = true
	web := slice("web", on(ep("10.0.0.1"), "n1"), on(ep("10.0.0.2"), "n2"))
	clusterIP := fe("10.96.0.10", 80, policyapi.ProtoTCP)
	tcp := func(a string, port uint16) ServiceFrontend { return fe(a, port, policyapi.ProtoTCP) }
	// ext is the entry of an externalIP, lb that of a load-balancer IP or
	// NodePort.
	ext := func(svc string, b []ServiceBackend) *ServiceEntry {
		return &ServiceEntry{Service: "prod/" + svc, Backends: b, External: true, FromExternalIPs: true}
	}
	lb := func(svc string, b []ServiceBackend) *ServiceEntry {
		return &ServiceEntry{Service: "prod/" + svc, Backends: b, External: true}
	}
	many := svc("many", policyapi.ServiceTypeNodePort, v4, nil)
	for i := range MaxExternalFrontends {
		many.Spec.ExternalIPs = append(many.Spec.ExternalIPs, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}).String())
	}
	// huge asks for more than MaxExternalClaims: it claims none of them,
	// so a later Service's externalIP on one of its addresses is
	// translated, where many's claim keeps it.
	huge := svc("huge", policyapi.ServiceTypeClusterIP, []string{"10.96.0.11"}, nil)
	for i := range MaxExternalClaims + 1 {
		huge.Spec.ExternalIPs = append(huge.Spec.ExternalIPs, netip.AddrFrom4([4]byte{192, 0, 2 + byte(i>>8), byte(i)}).String())
	}
	onto := func(name, clusterIP string) *policyapi.Service {
		return svc(name, policyapi.ServiceTypeClusterIP, []string{clusterIP}, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"192.0.2.7"} })
	}
	tests := []struct {
		name   string
		svcs   []*policyapi.Service
		slices []*policyapi.EndpointSlice
		want   map[ServiceFrontend]*ServiceEntry
	}{
		{
			name: "NodePort with externalIPs: each of its family that parses, and the node's addresses of it",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeNodePort, v4, func(s *policyapi.Service) {
				s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1", "::ffff:192.0.2.2", "192.0.2.1", "192.0.2", "192.168.001.010"}
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                  {Service: "prod/web", Backends: all},
				tcp("192.0.2.1", 80):       ext("web", allExt),
				tcp("192.0.2.2", 80):       ext("web", allExt),
				tcp("192.168.0.11", 30080): lb("web", allExt),
			},
		},
		{
			name: "LoadBalancer: its VIP addresses, not those a proxy load balancer serves; an externalIP that is also one is the cluster's",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeLoadBalancer, []string{"10.96.0.10", "fd00:96::10"}, func(s *policyapi.Service) {
				lbIPs(s, "", "VIP", "Proxy")
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, policyapi.LoadBalancerIngress{IP: "not-an-address"})
				s.Spec.ExternalIPs = []string{"198.51.100.21"}
			})},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                  {Service: "prod/web", Backends: all},
				tcp("fd00:96::10", 80):     {Service: "prod/web"},
				tcp("198.51.100.20", 80):   lb("web", allExt),
				tcp("198.51.100.21", 80):   lb("web", allExt),
				tcp("192.168.0.11", 30080): lb("web", allExt),
				tcp("fd00:1::11", 30080):   lb("web", nil),
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
				clusterIP:                  {Service: "prod/web", Backends: all},
				tcp("192.0.2.1", 80):       ext("web", allExt),
				tcp("192.168.0.11", 30080): lb("web", allExt),
			},
		},
		{
			name: "an address on the node and on another is not the node's",
			svcs: []*policyapi.Service{svc("web", policyapi.ServiceTypeClusterIP, v4, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} })},
			slices: []*policyapi.EndpointSlice{slice("web", on(ep("10.0.0.1"), "n1"), on(ep("10.0.0.2"), "n1")),
				mkSlice("prod", "web-b", "web", policyapi.AddressTypeIPv4, []string{":8080"}, on(ep("10.0.0.1"), "n2"))},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:            {Service: "prod/web", Backends: all},
				tcp("192.0.2.1", 80): ext("web", []ServiceBackend{all[0], {Addr: all[1].Addr, Port: 8080, Local: true}}),
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
				clusterIP:                  {Service: "prod/web", Backends: be("10.0.0.1:8080")},
				tcp("192.168.0.11", 30080): lb("web", allExt),
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
			name: "an externalIP takes no other Service's ClusterIP, load-balancer IP or NodePort; two externalIPs go to the first by name",
			svcs: []*policyapi.Service{
				svc("web", policyapi.ServiceTypeLoadBalancer, v4, func(s *policyapi.Service) { lbIPs(s, "") }),
				svc("a-hijack", policyapi.ServiceTypeClusterIP, []string{"10.96.0.11"}, func(s *policyapi.Service) {
					s.Spec.ExternalIPs = []string{"10.96.0.10", "192.0.2.1", "198.51.100.20", "192.168.0.11"}
					s.Spec.Ports = append(s.Spec.Ports, policyapi.ServicePort{Name: "np", Port: 30080})
					s.Spec.Ports[0].Name = "http"
				}),
				svc("b-other", policyapi.ServiceTypeClusterIP, []string{"10.96.0.12"}, func(s *policyapi.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }),
			},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                   {Service: "prod/web", Backends: all},
				tcp("198.51.100.20", 80):    lb("web", allExt),
				tcp("192.168.0.11", 30080):  lb("web", allExt),
				tcp("10.96.0.11", 80):       {Service: "prod/a-hijack"},
				tcp("10.96.0.11", 30080):    {Service: "prod/a-hijack"},
				tcp("10.96.0.12", 80):       {Service: "prod/b-other"},
				tcp("192.0.2.1", 80):        ext("a-hijack", nil),
				tcp("192.0.2.1", 30080):     ext("a-hijack", nil),
				tcp("10.96.0.10", 30080):    ext("a-hijack", nil),
				tcp("198.51.100.20", 30080): ext("a-hijack", nil),
				tcp("192.168.0.11", 80):     ext("a-hijack", nil),
			},
		},
		{
			name: "what kube-proxy keeps stays claimed: another Service's externalIPs do not take it",
			svcs: []*policyapi.Service{
				svc("local", policyapi.ServiceTypeLoadBalancer, v4, func(s *policyapi.Service) {
					lbIPs(s, "")
					s.Spec.ExternalTrafficPolicy = policyapi.ServiceExternalTrafficPolicyLocal
				}),
				svc("walled", policyapi.ServiceTypeLoadBalancer, []string{"10.96.0.11"}, func(s *policyapi.Service) {
					s.Spec.Ports[0].NodePort = 30081
					s.Status.LoadBalancer.Ingress = []policyapi.LoadBalancerIngress{{IP: "198.51.100.30"}}
					s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
				}),
				svc("a-hijack", policyapi.ServiceTypeClusterIP, []string{"10.96.0.12"}, func(s *policyapi.Service) {
					s.Spec.ExternalIPs = []string{"198.51.100.20", "198.51.100.30", "192.168.0.11"}
					s.Spec.Ports = append(s.Spec.Ports, policyapi.ServicePort{Name: "np", Port: 30080})
					s.Spec.Ports[0].Name = "http"
				}),
			},
			slices: []*policyapi.EndpointSlice{web},
			want: map[ServiceFrontend]*ServiceEntry{
				clusterIP:                   {Service: "prod/local"},
				tcp("10.96.0.11", 80):       {Service: "prod/walled"},
				tcp("192.168.0.11", 30081):  lb("walled", nil),
				tcp("10.96.0.12", 80):       {Service: "prod/a-hijack"},
				tcp("10.96.0.12", 30080):    {Service: "prod/a-hijack"},
				tcp("198.51.100.20", 30080): ext("a-hijack", nil),
				tcp("198.51.100.30", 30080): ext("a-hijack", nil),
				tcp("192.168.0.11", 80):     ext("a-hijack", nil),
			},
		},
		{
			// 256 externalIPs and one NodePort: one more than it may have.
			name:   "more than MaxExternalFrontends: only the ClusterIP, the rest is kube-proxy's",
			svcs:   []*policyapi.Service{many},
			slices: []*policyapi.EndpointSlice{slice("many", ep("10.0.0.1"))},
			want:   map[ServiceFrontend]*ServiceEntry{clusterIP: {Service: "prod/many", Backends: be("10.0.0.1:8080")}},
		},
		{
			name: "more than MaxExternalFrontends still claims: another Service's externalIP on one of them takes nothing",
			svcs: []*policyapi.Service{many, onto("zz", "10.96.0.12")},
			want: map[ServiceFrontend]*ServiceEntry{clusterIP: {Service: "prod/many"}, tcp("10.96.0.12", 80): {Service: "prod/zz"}},
		},
		{
			name: "more than MaxExternalClaims claims nothing",
			svcs: []*policyapi.Service{huge, onto("zz", "10.96.0.12")},
			want: map[ServiceFrontend]*ServiceEntry{tcp("10.96.0.11", 80): {Service: "prod/huge"}, tcp("10.96.0.12", 80): {Service: "prod/zz"},
				tcp("192.0.2.7", 80): ext("zz", nil)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkServicesBothWays(t, &Snapshot{Services: tc.svcs, EndpointSlices: tc.slices, Node: "n1", NodeAddrs: nodeAddrs}, tc.want)
		})
	}
}

// TestIncrementalExternalClaims: the incremental compiler follows the
// claims on external frontends through changes as Compile computes them
// afresh: the owner deleted and back, a Service's address moving between
// its externalIPs and its load balancer's, the node's addresses changing.
func TestIncrementalExternalClaims(t *testing.T) {
	web := mkService("prod", "web", []string{"10.96.0.10"}, ":80")
	web.Spec.Type = policyapi.ServiceTypeLoadBalancer
	web.Spec.Ports[0].NodePort = 30080
	web.Status.LoadBalancer.Ingress = []policyapi.LoadBalancerIngress{{IP: "198.51.100.20"}}
	hijack := mkService("prod", "a-hijack", []string{"10.96.0.11"}, ":80")
	hijack.Spec.ExternalIPs = []string{"198.51.100.20"}
	webExternal := mkService("prod", "web", []string{"10.96.0.10"}, ":80")
	webExternal.Spec.ExternalIPs = []string{"198.51.100.20"}
	sl := []*policyapi.EndpointSlice{mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":8080"}, ep("10.0.0.1"))}
	addrs1 := []netip.Addr{netip.MustParseAddr("192.168.0.11")}
	addrs2 := []netip.Addr{netip.MustParseAddr("192.168.0.12")}

	inc := NewIncremental()
	inc.SetNode("n1")
	for _, s := range sl {
		inc.SetEndpointSlice(s)
	}
	owner := func(d *Desired, addr string, port uint16) string {
		if e := d.Services[fe(addr, port, policyapi.ProtoTCP)]; e != nil {
			return e.Service
		}
		return ""
	}
	for _, step := range []struct {
		name          string
		do            func()
		svcs          []*policyapi.Service
		addrs         []netip.Addr
		lbOwner, node string // the owners of 198.51.100.20:80 and of the NodePort on addrs[0]
	}{
		{"both", func() { inc.SetService(web); inc.SetService(hijack); inc.SetNodeInfo("", addrs1) }, []*policyapi.Service{web, hijack}, addrs1, "prod/web", "prod/web"},
		{"the load balancer's Service deleted", func() { inc.DeleteService("prod", "web") }, []*policyapi.Service{hijack}, addrs1, "prod/a-hijack", ""},
		{"back", func() { inc.SetService(web) }, []*policyapi.Service{web, hijack}, addrs1, "prod/web", "prod/web"},
		{"its address now an externalIP of its own", func() { inc.SetService(webExternal) }, []*policyapi.Service{webExternal, hijack}, addrs1, "prod/a-hijack", ""},
		{"a load balancer's again, the node's address changed", func() { inc.SetService(web); inc.SetNodeInfo("", addrs2) }, []*policyapi.Service{web, hijack}, addrs2, "prod/web", "prod/web"},
		{"the node's addresses gone", func() { inc.SetNodeInfo("", nil) }, []*policyapi.Service{web, hijack}, nil, "prod/web", ""},
	} {
		step.do()
		got, err := inc.Compile()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want, err := Compile(&Snapshot{Services: step.svcs, EndpointSlices: sl, Node: "n1", NodeAddrs: step.addrs})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !reflect.DeepEqual(got.Services, want.Services) {
			t.Errorf("%s: Incremental\n%s\nCompile\n%s", step.name, describeServices(got.Services), describeServices(want.Services))
		}
		if o := owner(got, "198.51.100.20", 80); o != step.lbOwner {
			t.Errorf("%s: 198.51.100.20:80 is %q's, want %q's", step.name, o, step.lbOwner)
		}
		node := "192.168.0.11"
		if len(step.addrs) > 0 {
			node = step.addrs[0].String()
		}
		if o := owner(got, node, 30080); o != step.node {
			t.Errorf("%s: %s:30080 is %q's, want %q's", step.name, node, o, step.node)
		}
	}
}
