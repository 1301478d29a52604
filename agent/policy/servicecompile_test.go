package policy

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// mkService returns Service ns/name with clusterIPs and ports "name:port/proto
// ->target" (e.g. "http:80/TCP->8080", "dns:53/UDP->dns", ":80").
func mkService(ns, name string, clusterIPs []string, ports ...string) *policyapi.Service {
	s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name}, Spec: policyapi.ServiceSpec{ClusterIPs: clusterIPs}}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, p := range ports {
		var sp policyapi.ServicePort
		spec, target, _ := strings.Cut(p, "->")
		name, rest, _ := strings.Cut(spec, ":")
		num, proto, _ := strings.Cut(rest, "/")
		sp.Name, sp.Protocol = name, policyapi.Protocol(proto)
		fmt.Sscan(num, &sp.Port)
		if target != "" {
			var n int32
			if _, err := fmt.Sscan(target, &n); err == nil {
				sp.TargetPort = policyapi.FromInt(n)
			} else {
				sp.TargetPort = policyapi.FromString(target)
			}
		}
		s.Spec.Ports = append(s.Spec.Ports, sp)
	}
	return s
}

// mkSlice returns EndpointSlice ns/name of Service svc with ports
// "name:port/proto" and endpoints.
func mkSlice(ns, name, svc string, at policyapi.AddressType, ports []string, eps ...policyapi.SliceEndpoint) *policyapi.EndpointSlice {
	s := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name}, AddressType: at, Endpoints: eps}
	if svc != "" {
		s.Labels = map[string]string{policyapi.ServiceNameLabel: svc}
	}
	for _, p := range ports {
		name, rest, _ := strings.Cut(p, ":")
		num, proto, _ := strings.Cut(rest, "/")
		var port int32
		fmt.Sscan(num, &port)
		ep := policyapi.EndpointSlicePort{Name: &name, Port: &port}
		if proto != "" {
			pr := policyapi.Protocol(proto)
			ep.Protocol = &pr
		}
		s.Ports = append(s.Ports, ep)
	}
	return s
}

// ep is a ready endpoint; its conditions are set with cond.
func ep(addr string) policyapi.SliceEndpoint {
	return policyapi.SliceEndpoint{Addresses: []string{addr}}
}

// cond sets the ready, serving and terminating conditions ("" leaves one
// nil, "t" true, "f" false).
func cond(e policyapi.SliceEndpoint, ready, serving, terminating string) policyapi.SliceEndpoint {
	b := func(s string) *bool {
		if s == "" {
			return nil
		}
		v := s == "t"
		return &v
	}
	e.Conditions = policyapi.EndpointConditions{Ready: b(ready), Serving: b(serving), Terminating: b(terminating)}
	return e
}

func fe(addr string, port uint16, proto uint8) ServiceFrontend {
	return ServiceFrontend{Addr: netip.MustParseAddr(addr), Port: port, Proto: proto}
}

// be parses "addr:port" backends ("[v6]:port" for IPv6).
func be(s ...string) []ServiceBackend {
	var out []ServiceBackend
	for _, x := range s {
		ap := netip.MustParseAddrPort(x)
		out = append(out, ServiceBackend{Addr: ap.Addr(), Port: ap.Port()})
	}
	return out
}

// describeServices renders Services for a failure message, sorted.
func describeServices(m map[ServiceFrontend]*ServiceEntry) string {
	var lines []string
	for fe, e := range m {
		lines = append(lines, fmt.Sprintf("%s:%d/%d -> %s %v affinity %v no-local %t external %t from-externalIPs %t", fe.Addr, fe.Port, fe.Proto, e.Service, e.Backends, e.AffinityTimeout, e.NoLocalBackend, e.External, e.FromExternalIPs))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestCompileServices(t *testing.T) {
	v4 := []string{"10.96.0.10"}
	dual := []string{"10.96.0.10", "fd00:96::10"}
	web := func(s *policyapi.Service) *policyapi.Service {
		s.Spec.Selector = map[string]string{"app": "web"}
		return s
	}
	tests := []struct {
		name   string
		svcs   []*policyapi.Service
		slices []*policyapi.EndpointSlice
		want   map[ServiceFrontend]*ServiceEntry
	}{
		{
			name: "one port, ready endpoints sorted, duplicates across slices once",
			svcs: []*policyapi.Service{web(mkService("prod", "web", v4, ":80"))},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "web-a", "web", policyapi.AddressTypeIPv4, []string{":8080"}, ep("10.0.0.9"), ep("10.0.0.2")),
				mkSlice("prod", "web-b", "web", policyapi.AddressTypeIPv4, []string{":8080"}, ep("10.0.0.2"), cond(ep("10.0.0.5"), "t", "t", "f")),
			},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/web", Backends: be("10.0.0.2:8080", "10.0.0.5:8080", "10.0.0.9:8080")},
			},
		},
		{
			name: "ports matched by name and protocol; each its own target",
			svcs: []*policyapi.Service{mkService("prod", "dns", v4, "dns:53/UDP->dns", "dns-tcp:53/TCP->dns-tcp", "metrics:9153/TCP")},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "dns-1", "dns", policyapi.AddressTypeIPv4, []string{"dns:5353/UDP", "dns-tcp:5353/TCP", "metrics:9153/UDP"}, ep("10.0.0.3")),
				mkSlice("prod", "dns-2", "dns", policyapi.AddressTypeIPv4, []string{"dns:53/UDP"}, ep("10.0.0.4")),
			},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.10", 53, policyapi.ProtoUDP):   {Service: "prod/dns", Backends: be("10.0.0.3:5353", "10.0.0.4:53")},
				fe("10.96.0.10", 53, policyapi.ProtoTCP):   {Service: "prod/dns", Backends: be("10.0.0.3:5353")},
				fe("10.96.0.10", 9153, policyapi.ProtoTCP): {Service: "prod/dns"}, // the slice's metrics port is UDP
			},
		},
		{
			name: "dual stack: each ClusterIP gets the endpoints of its family",
			svcs: []*policyapi.Service{mkService("prod", "web", dual, ":80/TCP")},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "web-v4", "web", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.2")),
				mkSlice("prod", "web-v6", "web", policyapi.AddressTypeIPv6, []string{":80"}, ep("fd00::2"), ep("10.0.0.7")),
				mkSlice("prod", "web-fqdn", "web", policyapi.AddressTypeFQDN, []string{":80"}, ep("web.example")),
			},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.10", 80, policyapi.ProtoTCP):  {Service: "prod/web", Backends: be("10.0.0.2:80")},
				fe("fd00:96::10", 80, policyapi.ProtoTCP): {Service: "prod/web", Backends: be("[fd00::2]:80")},
			},
		},
		{
			name: "readiness: nil ready counts; not ready and serving-only are left out",
			svcs: []*policyapi.Service{mkService("prod", "web", v4, ":80")},
			slices: []*policyapi.EndpointSlice{mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"},
				cond(ep("10.0.0.1"), "", "", ""),
				cond(ep("10.0.0.2"), "f", "t", "f"),
				cond(ep("10.0.0.3"), "f", "t", "t"), // terminating: only without ready ones
				cond(ep("10.0.0.4"), "f", "f", "f"),
			)},
			want: map[ServiceFrontend]*ServiceEntry{fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/web", Backends: be("10.0.0.1:80")}},
		},
		{
			name: "no ready endpoint: the serving terminating ones",
			svcs: []*policyapi.Service{mkService("prod", "web", v4, ":80")},
			slices: []*policyapi.EndpointSlice{mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"},
				cond(ep("10.0.0.2"), "f", "t", "f"),
				cond(ep("10.0.0.3"), "f", "t", "t"),
				cond(ep("10.0.0.4"), "f", "", "t"),
				cond(ep("10.0.0.5"), "f", "f", "t"),
			)},
			want: map[ServiceFrontend]*ServiceEntry{fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/web", Backends: be("10.0.0.3:80", "10.0.0.4:80")}},
		},
		{
			name: "no endpoint at all: the frontend stays, without backends",
			svcs: []*policyapi.Service{mkService("prod", "web", v4, ":80")},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"}, cond(ep("10.0.0.2"), "f", "f", "t")),
				mkSlice("prod", "other", "other", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.3")),
				mkSlice("test", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.4")), // another namespace
				mkSlice("prod", "unlabelled", "", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.5")),
			},
			want: map[ServiceFrontend]*ServiceEntry{fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/web"}},
		},
		{
			name: "unusable slice contents are left out",
			svcs: []*policyapi.Service{mkService("prod", "web", v4, ":80")},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"},
					ep("not-an-address"), policyapi.SliceEndpoint{}, ep("fe80::1%eth0"), policyapi.SliceEndpoint{Addresses: []string{"10.0.0.2", "10.0.0.3"}}),
				{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web-2", Labels: map[string]string{policyapi.ServiceNameLabel: "web"}},
					AddressType: policyapi.AddressTypeIPv4, Endpoints: []policyapi.SliceEndpoint{ep("10.0.0.9")}, Ports: []policyapi.EndpointSlicePort{{}}},
			},
			want: map[ServiceFrontend]*ServiceEntry{fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/web", Backends: be("10.0.0.2:80")}},
		},
		{
			name: "session affinity: the default timeout, or the configured one",
			svcs: []*policyapi.Service{
				func() *policyapi.Service {
					s := mkService("prod", "a", v4, ":80")
					s.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
					return s
				}(),
				func() *policyapi.Service {
					s := mkService("prod", "b", []string{"10.96.0.11"}, ":80")
					s.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
					s.Spec.SessionAffinityConfig = &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
					return s
				}(),
				func() *policyapi.Service {
					s := mkService("prod", "c", []string{"10.96.0.12"}, ":80")
					s.Spec.SessionAffinityConfig = &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
					return s
				}(),
			},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "prod/a", AffinityTimeout: 3 * time.Hour},
				fe("10.96.0.11", 80, policyapi.ProtoTCP): {Service: "prod/b", AffinityTimeout: time.Minute},
				fe("10.96.0.12", 80, policyapi.ProtoTCP): {Service: "prod/c"}, // a config without ClientIP affinity
			},
		},
		{
			name: "headless, ExternalName and portless Services have no frontend",
			svcs: []*policyapi.Service{
				mkService("prod", "headless", []string{"None"}, ":80"),
				func() *policyapi.Service {
					s := mkService("prod", "ext", nil, ":80")
					s.Spec.Type = policyapi.ServiceTypeExternalName
					return s
				}(),
				mkService("prod", "noports", v4),
			},
			slices: []*policyapi.EndpointSlice{mkSlice("prod", "headless-1", "headless", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.2"))},
			want:   nil,
		},
		{
			name: "NodePort and LoadBalancer Services are reached by ClusterIP too; mapped addresses unmapped",
			svcs: []*policyapi.Service{
				func() *policyapi.Service {
					s := mkService("prod", "np", []string{"::ffff:10.96.0.20"}, ":80")
					s.Spec.Type = policyapi.ServiceTypeNodePort
					return s
				}(),
				func() *policyapi.Service {
					s := mkService("prod", "lb", []string{"10.96.0.21"}, ":443")
					s.Spec.Type = policyapi.ServiceTypeLoadBalancer
					return s
				}(),
			},
			slices: []*policyapi.EndpointSlice{mkSlice("prod", "np-1", "np", policyapi.AddressTypeIPv4, []string{":80"}, ep("::ffff:10.0.0.2"))},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.20", 80, policyapi.ProtoTCP):  {Service: "prod/np", Backends: be("10.0.0.2:80")},
				fe("10.96.0.21", 443, policyapi.ProtoTCP): {Service: "prod/lb"},
			},
		},
		{
			name: "two Services on one frontend: the first by namespace/name",
			svcs: []*policyapi.Service{mkService("b", "web", v4, "x:80", "y:82"), mkService("a", "web", v4, "x:80", "y:81")},
			want: map[ServiceFrontend]*ServiceEntry{
				fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "a/web"},
				fe("10.96.0.10", 81, policyapi.ProtoTCP): {Service: "a/web"},
				fe("10.96.0.10", 82, policyapi.ProtoTCP): {Service: "b/web"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Compile(&Snapshot{Services: tc.svcs, EndpointSlices: tc.slices})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.Services, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", describeServices(d.Services), describeServices(tc.want))
			}
		})
	}
}

// on sets the endpoint's nodeName.
func on(e policyapi.SliceEndpoint, node string) policyapi.SliceEndpoint {
	e.NodeName = &node
	return e
}

// TestCompileServicesInternalTrafficPolicy: with internalTrafficPolicy
// Local, a node's pods reach only the endpoints on that node, as kube-proxy
// picks them for the cluster's own traffic (ready ones, else serving and
// terminating ones, of this node); with none there but some elsewhere the
// frontend says so (the dataplane drops), with none anywhere it has no
// backend (refused). Compile and the incremental compiler agree.
func TestCompileServicesInternalTrafficPolicy(t *testing.T) {
	v4 := []string{"10.96.0.10"}
	policy := func(p policyapi.ServiceInternalTrafficPolicy, s *policyapi.Service) *policyapi.Service {
		s.Spec.InternalTrafficPolicy = &p
		return s
	}
	local := func() *policyapi.Service {
		return policy(policyapi.ServiceInternalTrafficPolicyLocal, mkService("prod", "web", v4, ":80"))
	}
	slice := func(eps ...policyapi.SliceEndpoint) []*policyapi.EndpointSlice {
		return []*policyapi.EndpointSlice{mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":8080"}, eps...)}
	}
	frontend := fe("10.96.0.10", 80, policyapi.ProtoTCP)
	tests := []struct {
		name   string
		node   string
		svcs   []*policyapi.Service
		slices []*policyapi.EndpointSlice
		want   map[ServiceFrontend]*ServiceEntry
	}{
		{
			name:   "Local: only this node's ready endpoints",
			node:   "n1",
			svcs:   []*policyapi.Service{local()},
			slices: slice(on(ep("10.0.0.1"), "n1"), on(ep("10.0.0.2"), "n2"), on(ep("10.0.0.3"), "n1"), ep("10.0.0.4")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", Backends: be("10.0.0.1:8080", "10.0.0.3:8080")}},
		},
		{
			name: "Local: this node's serving terminating ones when it has no ready one, though others have",
			node: "n1",
			svcs: []*policyapi.Service{local()},
			slices: slice(on(cond(ep("10.0.0.1"), "f", "t", "t"), "n1"), on(ep("10.0.0.2"), "n2"),
				on(cond(ep("10.0.0.3"), "f", "f", "t"), "n1"), on(cond(ep("10.0.0.5"), "f", "t", "f"), "n1")),
			want: map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", Backends: be("10.0.0.1:8080")}},
		},
		{
			name:   "Local: none on this node, ready ones elsewhere (or on no node): dropped",
			node:   "n1",
			svcs:   []*policyapi.Service{local()},
			slices: slice(on(ep("10.0.0.2"), "n2"), ep("10.0.0.4"), on(cond(ep("10.0.0.1"), "f", "t", "f"), "n1")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", NoLocalBackend: true}},
		},
		{
			name:   "Local: none on this node, a serving terminating one elsewhere: dropped",
			node:   "n1",
			svcs:   []*policyapi.Service{local()},
			slices: slice(on(cond(ep("10.0.0.2"), "f", "t", "t"), "n2")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", NoLocalBackend: true}},
		},
		{
			name:   "Local: no endpoint that would serve anywhere: refused, as without the policy",
			node:   "n1",
			svcs:   []*policyapi.Service{local()},
			slices: slice(on(cond(ep("10.0.0.2"), "f", "t", "f"), "n2"), on(cond(ep("10.0.0.3"), "f", "f", "t"), "n1")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web"}},
		},
		{
			name:   "Cluster: every node's",
			node:   "n1",
			svcs:   []*policyapi.Service{policy(policyapi.ServiceInternalTrafficPolicyCluster, mkService("prod", "web", v4, ":80"))},
			slices: slice(on(ep("10.0.0.1"), "n1"), on(ep("10.0.0.2"), "n2"), ep("10.0.0.4")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", Backends: be("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.4:8080")}},
		},
		{
			name:   "Local without a node (standalone): every endpoint is this node's",
			svcs:   []*policyapi.Service{local()},
			slices: slice(on(ep("10.0.0.2"), "n2"), ep("10.0.0.4")),
			want:   map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", Backends: be("10.0.0.2:8080", "10.0.0.4:8080")}},
		},
		{
			name: "Local, dual stack: each family on its own",
			node: "n1",
			svcs: []*policyapi.Service{policy(policyapi.ServiceInternalTrafficPolicyLocal, mkService("prod", "web", []string{"10.96.0.10", "fd00:96::10"}, ":80"))},
			slices: []*policyapi.EndpointSlice{
				mkSlice("prod", "web-4", "web", policyapi.AddressTypeIPv4, []string{":80"}, on(ep("10.0.0.1"), "n1")),
				mkSlice("prod", "web-6", "web", policyapi.AddressTypeIPv6, []string{":80"}, on(ep("fd00::2"), "n2")),
			},
			want: map[ServiceFrontend]*ServiceEntry{
				frontend: {Service: "prod/web", Backends: be("10.0.0.1:80")},
				fe("fd00:96::10", 80, policyapi.ProtoTCP): {Service: "prod/web", NoLocalBackend: true},
			},
		},
		{
			name: "a Service labelled for another proxy, whatever the value, is not translated",
			node: "n1",
			svcs: []*policyapi.Service{func() *policyapi.Service {
				s := mkService("prod", "web", v4, ":80")
				s.Labels = map[string]string{policyapi.ServiceProxyNameLabel: "other-proxy"}
				return s
			}(), func() *policyapi.Service {
				s := mkService("prod", "empty-label", []string{"10.96.0.11"}, ":80")
				s.Labels = map[string]string{policyapi.ServiceProxyNameLabel: ""}
				return s
			}()},
			slices: slice(on(ep("10.0.0.1"), "n1")),
			want:   nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkServicesBothWays(t, &Snapshot{Services: tc.svcs, EndpointSlices: tc.slices, Node: tc.node}, tc.want)
		})
	}
}

// checkServicesBothWays checks that Compile of snap and the incremental
// compiler give want as Desired.Services; the incremental one is told the
// snapshot's node and zone after its objects (a change of either
// recomputes every Service).
func checkServicesBothWays(t *testing.T, snap *Snapshot, want map[ServiceFrontend]*ServiceEntry) {
	t.Helper()
	d, err := Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Services, want) {
		t.Errorf("Compile: got\n%s\nwant\n%s", describeServices(d.Services), describeServices(want))
	}
	inc := NewIncremental()
	for _, s := range snap.Services {
		inc.SetService(s)
	}
	for _, s := range snap.EndpointSlices {
		inc.SetEndpointSlice(s)
	}
	if _, err := inc.Compile(); err != nil {
		t.Fatal(err)
	}
	inc.SetNode(snap.Node)
	inc.SetNodeInfo(snap.Zone, snap.NodeAddrs)
	got, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Services, want) {
		t.Errorf("Incremental: got\n%s\nwant\n%s", describeServices(got.Services), describeServices(want))
	}
}

// hinted gives the endpoint topology hints: zones, and nodes after "|".
func hinted(e policyapi.SliceEndpoint, hints ...string) policyapi.SliceEndpoint {
	e.Hints = &policyapi.EndpointHints{}
	nodes := false
	for _, h := range hints {
		switch {
		case h == "|":
			nodes = true
		case nodes:
			e.Hints.ForNodes = append(e.Hints.ForNodes, policyapi.ForNode{Name: h})
		default:
			e.Hints.ForZones = append(e.Hints.ForZones, policyapi.ForZone{Name: h})
		}
	}
	return e
}

// TestCompileServicesTopologyHints: a Service's cluster-wide traffic
// follows its endpoints' hints as kube-proxy follows them: node hints when
// every ready endpoint has some and one names this node, else zone hints
// when every ready endpoint has some and one names this node's zone, else
// every ready endpoint. Unready endpoints count for nothing; the serving
// and terminating fallback and internalTrafficPolicy Local ignore hints.
// Compile and the incremental compiler agree.
func TestCompileServicesTopologyHints(t *testing.T) {
	web := func() []*policyapi.Service {
		return []*policyapi.Service{mkService("prod", "web", []string{"10.96.0.10"}, ":80")}
	}
	slice := func(eps ...policyapi.SliceEndpoint) []*policyapi.EndpointSlice {
		return []*policyapi.EndpointSlice{mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{":8080"}, eps...)}
	}
	frontend := fe("10.96.0.10", 80, policyapi.ProtoTCP)
	entry := func(backends ...string) map[ServiceFrontend]*ServiceEntry {
		return map[ServiceFrontend]*ServiceEntry{frontend: {Service: "prod/web", Backends: be(backends...)}}
	}
	tests := []struct {
		name       string
		node, zone string
		svcs       []*policyapi.Service
		slices     []*policyapi.EndpointSlice
		want       map[ServiceFrontend]*ServiceEntry
	}{
		{
			name: "zone hints: this zone's endpoints only",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a"), hinted(ep("10.0.0.2"), "b"), hinted(ep("10.0.0.3"), "a")),
			want:   entry("10.0.0.1:8080", "10.0.0.3:8080"),
		},
		{
			name: "an endpoint hinted for several zones serves each",
			node: "n1", zone: "b",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a", "b"), hinted(ep("10.0.0.2"), "c")),
			want:   entry("10.0.0.1:8080"),
		},
		{
			name: "a ready endpoint without hints: every endpoint",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a"), ep("10.0.0.2")),
			want:   entry("10.0.0.1:8080", "10.0.0.2:8080"),
		},
		{
			name: "an unready endpoint without hints counts for nothing",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a"), hinted(ep("10.0.0.2"), "b"), cond(ep("10.0.0.3"), "f", "f", "f")),
			want:   entry("10.0.0.1:8080"),
		},
		{
			name: "no endpoint hinted for this zone: every endpoint",
			node: "n1", zone: "c",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a"), hinted(ep("10.0.0.2"), "b")),
			want:   entry("10.0.0.1:8080", "10.0.0.2:8080"),
		},
		{
			name:   "a node without a zone: every endpoint",
			node:   "n1",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a"), hinted(ep("10.0.0.2"), "b")),
			want:   entry("10.0.0.1:8080", "10.0.0.2:8080"),
		},
		{
			name: "node hints come before zone hints",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a", "|", "n2"), hinted(ep("10.0.0.2"), "a", "|", "n1"), hinted(ep("10.0.0.3"), "b", "|", "n3")),
			want:   entry("10.0.0.2:8080"),
		},
		{
			name: "no endpoint hinted for this node: zone hints",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a", "|", "n2"), hinted(ep("10.0.0.2"), "b", "|", "n3")),
			want:   entry("10.0.0.1:8080"),
		},
		{
			name: "node hints on some endpoints only: zone hints",
			node: "n1", zone: "b",
			svcs:   web(),
			slices: slice(hinted(ep("10.0.0.1"), "a", "|", "n1"), hinted(ep("10.0.0.2"), "b")),
			want:   entry("10.0.0.2:8080"),
		},
		{
			name: "no ready endpoint: the serving and terminating ones, whatever their hints",
			node: "n1", zone: "a",
			svcs:   web(),
			slices: slice(hinted(cond(ep("10.0.0.1"), "f", "t", "t"), "a"), hinted(cond(ep("10.0.0.2"), "f", "t", "t"), "b")),
			want:   entry("10.0.0.1:8080", "10.0.0.2:8080"),
		},
		{
			name: "internalTrafficPolicy Local: this node's endpoints, whatever their hints",
			node: "n1", zone: "a",
			svcs: func() []*policyapi.Service {
				s := web()
				p := policyapi.ServiceInternalTrafficPolicyLocal
				s[0].Spec.InternalTrafficPolicy = &p
				return s
			}(),
			slices: slice(on(hinted(ep("10.0.0.1"), "b"), "n1"), on(hinted(ep("10.0.0.2"), "a"), "n2")),
			want:   entry("10.0.0.1:8080"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkServicesBothWays(t, &Snapshot{Services: tc.svcs, EndpointSlices: tc.slices, Node: tc.node, Zone: tc.zone}, tc.want)
		})
	}
}

// TestServicePortNamesAreDNSLabels: a Service port's name is a DNS label,
// longer than the 15 characters a container port's name may have; the
// upstream e2e tests name theirs "service-port-tcp-80".
func TestServicePortNamesAreDNSLabels(t *testing.T) {
	for _, name := range []string{"service-port-tcp-80", "dns-tcp", "80", strings.Repeat("a", 63)} {
		svc := mkService("prod", "s", []string{"10.96.0.1"}, name+":80", "other:81")
		if err := svc.Validate(); err != nil {
			t.Errorf("port name %q: %v", name, err)
		}
	}
}

func TestCompileServiceErrors(t *testing.T) {
	tests := []struct {
		name string
		svc  *policyapi.Service
		want string
	}{
		{"no name", mkService("prod", "", []string{"10.96.0.1"}, ":80"), "metadata.name is required"},
		{"bad ClusterIP", mkService("prod", "s", []string{"10.96.0"}, ":80"), "spec.clusterIPs[0]"},
		{"two of one family", mkService("prod", "s", []string{"10.96.0.1", "10.96.0.2"}, ":80"), "two ClusterIPs of one family"},
		{"None with an address", mkService("prod", "s", []string{"None", "fd00::1"}, ":80"), "must be the only ClusterIP"},
		{"clusterIP and clusterIPs differ", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.ClusterIP = "10.96.0.2"
			return s
		}(), "differs from spec.clusterIP"},
		{"unnamed port among several", mkService("prod", "s", []string{"10.96.0.1"}, ":80", "b:81"), "spec.ports[0].name: required"},
		{"duplicate port", mkService("prod", "s", []string{"10.96.0.1"}, "a:80", "b:80/TCP"), "duplicate port 80/TCP"},
		{"port out of range", mkService("prod", "s", []string{"10.96.0.1"}, ":0"), "port 0 out of range"},
		{"bad protocol", mkService("prod", "s", []string{"10.96.0.1"}, ":80/ICMP"), "unknown protocol"},
		{"bad externalTrafficPolicy", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.ExternalTrafficPolicy = "Nearby"
			return s
		}(), `spec.externalTrafficPolicy: unknown policy "Nearby"`},
		{"nodePort out of range", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.Type, s.Spec.Ports[0].NodePort = policyapi.ServiceTypeNodePort, 70000
			return s
		}(), "nodePort 70000 out of range"},
		{"bad target name", mkService("prod", "s", []string{"10.96.0.1"}, ":80->Http"), "invalid port name"},
		{"bad port name", mkService("prod", "s", []string{"10.96.0.1"}, "Web_80:80", "b:81"), "invalid port name"},
		{"port name ends with a dash", mkService("prod", "s", []string{"10.96.0.1"}, "web-:80", "b:81"), "invalid port name"},
		{"port name too long", mkService("prod", "s", []string{"10.96.0.1"}, strings.Repeat("a", 64)+":80", "b:81"), "invalid port name"},
		{"target out of range", mkService("prod", "s", []string{"10.96.0.1"}, ":80->70000"), "targetPort 70000 out of range"},
		{"bad type", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.Type = "Internal"
			return s
		}(), "unknown type"},
		{"bad internal traffic policy", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.InternalTrafficPolicy = ptr[policyapi.ServiceInternalTrafficPolicy]("Node")
			return s
		}(), "spec.internalTrafficPolicy: unknown policy"},
		{"bad affinity", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.SessionAffinity = "Cookie"
			return s
		}(), "unknown session affinity"},
		{"affinity timeout too long", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](86401)}}
			return s
		}(), "timeoutSeconds: 86401 out of range"},
		{"bad selector", func() *policyapi.Service {
			s := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
			s.Spec.Selector = map[string]string{"app": "-web"}
			return s
		}(), "spec.selector"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Compile(&Snapshot{Services: []*policyapi.Service{tc.svc}}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	dup := mkService("prod", "s", []string{"10.96.0.1"}, ":80")
	if _, err := Compile(&Snapshot{Services: []*policyapi.Service{dup, dup}}); err == nil {
		t.Error("a Service listed twice compiled")
	}
	sl := mkSlice("prod", "s-1", "s", policyapi.AddressTypeIPv4, nil)
	if _, err := Compile(&Snapshot{EndpointSlices: []*policyapi.EndpointSlice{sl, sl}}); err == nil {
		t.Error("an EndpointSlice listed twice compiled")
	}
}

// TestServiceDefaultMatchesCompile: a Service defaulted as the API server
// does compiles to what the same Service without the defaults gives.
func TestServiceDefaultMatchesCompile(t *testing.T) {
	bare := mkService("prod", "web", []string{"10.96.0.10"}, "http:80", "dns:53/UDP->dns")
	bare.Spec.ClusterIPs = nil
	bare.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
	defaulted := mkService("prod", "web", []string{"10.96.0.10"}, "http:80", "dns:53/UDP->dns")
	defaulted.Spec.ClusterIPs = nil
	defaulted.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
	defaulted.Default()
	want := policyapi.ServiceSpec{
		Type: policyapi.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
		Ports: []policyapi.ServicePort{
			{Name: "http", Protocol: policyapi.TCP, Port: 80, TargetPort: policyapi.FromInt(80)},
			{Name: "dns", Protocol: policyapi.UDP, Port: 53, TargetPort: policyapi.FromString("dns")},
		},
		SessionAffinity:       policyapi.ServiceAffinityClientIP,
		SessionAffinityConfig: &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](10800)}},
		InternalTrafficPolicy: ptr(policyapi.ServiceInternalTrafficPolicyCluster),
	}
	if !reflect.DeepEqual(defaulted.Spec, want) {
		t.Fatalf("defaulted spec\n%+v\nwant\n%+v", defaulted.Spec, want)
	}
	a, errA := Compile(&Snapshot{Services: []*policyapi.Service{bare}})
	b, errB := Compile(&Snapshot{Services: []*policyapi.Service{defaulted}})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !reflect.DeepEqual(a.Services, b.Services) || len(a.Services) != 2 {
		t.Errorf("bare:\n%s\ndefaulted:\n%s", describeServices(a.Services), describeServices(b.Services))
	}
}
