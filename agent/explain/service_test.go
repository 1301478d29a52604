package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func service(ns, name string, ips []string, selector map[string]string, ports ...policyapi.ServicePort) *policyapi.Service {
	s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyapi.ServiceSpec{ClusterIPs: ips, Selector: selector, Ports: ports}}
	if len(ips) > 0 {
		s.Spec.ClusterIP = ips[0]
	}
	return s
}

func svcPort(name string, proto policyapi.Protocol, port int32, target *policyapi.IntOrString) policyapi.ServicePort {
	return policyapi.ServicePort{Name: name, Protocol: proto, Port: port, TargetPort: target}
}

// dual gives a pod an IPv6 address beside its IPv4 one.
func dual(p *policyapi.Pod, v6 string) *policyapi.Pod {
	p.Status.PodIPs = []policyapi.PodIP{{IP: p.Status.PodIP}, {IP: v6}}
	return p
}

// serviceFixture is namespace x with Services in front of its pods, the
// slices the standalone agent computes for them, and the policies each
// case adds:
//   - x/web (10.96.0.40, fd00:96::40; port 80 targets "http"): x/web-1
//     calls 8080/TCP "http", x/web-2 9090/TCP, x/web-3 declares no
//     "http" and is no endpoint.
//   - x/gate (10.96.0.20; port 80, no targetPort) selects every app=web
//     pod: x/web-1 (gate=open), x/web-2 (gate=closed) and x/web-3.
//   - x/dns (10.96.0.10; 53/UDP targets "dns", 53/TCP "dns-tcp"):
//     x/dns.
//   - x/nobody (10.96.0.51; 80/TCP, 53/UDP) selects no pod; x/unready
//     (10.96.0.52; 80) selects x/pending, which has no address yet.
//   - x/client (app=client) is no Service's backend.
func serviceFixture(policies ...*policyapi.NetworkPolicy) *policy.Snapshot {
	web := map[string]string{"app": "web"}
	pods := []*policyapi.Pod{
		dual(pod("x", "client", "10.0.1.1", map[string]string{"app": "client"}), "fd00::1:1"),
		dual(pod("x", "web-1", "10.0.1.11", map[string]string{"app": "web", "gate": "open"}, policyapi.ContainerPort{Name: "http", ContainerPort: 8080}), "fd00::1:11"),
		dual(pod("x", "web-2", "10.0.1.12", map[string]string{"app": "web", "gate": "closed"}, policyapi.ContainerPort{Name: "http", ContainerPort: 9090}), "fd00::1:12"),
		dual(pod("x", "web-3", "10.0.1.13", web, policyapi.ContainerPort{Name: "admin", ContainerPort: 7070}), "fd00::1:13"),
		dual(pod("x", "dns", "10.0.1.53", map[string]string{"app": "dns"},
			policyapi.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP},
			policyapi.ContainerPort{Name: "dns-tcp", ContainerPort: 53, Protocol: policyapi.TCP}), "fd00::1:53"),
		pod("x", "pending", "", map[string]string{"app": "pending"}),
	}
	svcs := []*policyapi.Service{
		service("x", "web", []string{"10.96.0.40", "fd00:96::40"}, web, svcPort("http", "", 80, policyapi.FromString("http"))),
		service("x", "gate", []string{"10.96.0.20"}, web, svcPort("", "", 80, nil)),
		service("x", "dns", []string{"10.96.0.10"}, map[string]string{"app": "dns"},
			svcPort("dns", policyapi.UDP, 53, policyapi.FromString("dns")), svcPort("dns-tcp", policyapi.TCP, 53, policyapi.FromString("dns-tcp"))),
		service("x", "nobody", []string{"10.96.0.51"}, map[string]string{"app": "nobody"}, svcPort("http", "", 80, nil), svcPort("dns", policyapi.UDP, 53, nil)),
		service("x", "unready", []string{"10.96.0.52"}, map[string]string{"app": "pending"}, svcPort("http", "", 80, nil)),
	}
	s := fixture(policies...)
	s.Pods, s.Services = pods, svcs
	s.EndpointSlices = endpointslice.FromStatus(svcs, pods)
	return s
}

func TestExplainService(t *testing.T) {
	webHTTP := np("x", "web-http", policyapi.NetworkPolicySpec{
		PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Ingress: []policyapi.IngressRule{{
			From:  []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
			Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}},
		}},
	})
	denyClosed := np("x", "deny-closed", policyapi.NetworkPolicySpec{
		PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"gate": "closed"}},
		PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
	})
	clientDNS := np("x", "client-dns", policyapi.NetworkPolicySpec{
		PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
		PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
		Egress: []policyapi.EgressRule{{
			To:    []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "dns"}}}},
			Ports: []policyapi.NetworkPolicyPort{{Protocol: proto(policyapi.UDP), Port: policyapi.FromInt(53)}},
		}},
	})
	isolated := np("x", "client-isolated", policyapi.NetworkPolicySpec{
		PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
		PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
	})
	for _, tc := range []struct {
		name     string
		policies []*policyapi.NetworkPolicy
		from, to string
		port     string
		family   int
		verdict  string
		address  string   // the ClusterIP translated
		backends []string // POD:PORT verdict
		reason   string   // a part of the reason
	}{
		{name: "named targetPort resolves on each backend", policies: []*policyapi.NetworkPolicy{webHTTP},
			from: "x/client", to: "svc/x/web", port: "80", verdict: Allow, address: "10.96.0.40",
			backends: []string{"x/web-1:8080 allow", "x/web-2:9090 allow"}, reason: "every backend allows: x/web-1:8080, x/web-2:9090"},
		{name: "named targetPort: a backend's own client is denied on every backend", policies: []*policyapi.NetworkPolicy{webHTTP},
			from: "x/web-1", to: "10.96.0.40", port: "80", verdict: Deny, address: "10.96.0.40",
			backends: []string{"x/web-1:8080 deny", "x/web-2:9090 deny"}, reason: "x/web-2:9090 denies: ingress of x/web-2: default deny"},
		{name: "the ClusterIP of the family asked", policies: []*policyapi.NetworkPolicy{webHTTP},
			from: "x/client", to: "svc/x/web", port: "80", family: 6, verdict: Allow, address: "fd00:96::40",
			backends: []string{"x/web-1:8080 allow", "x/web-2:9090 allow"}},
		{name: "an IPv6 ClusterIP translates to IPv6 backends",
			from: "x/client", to: "fd00:96::40", port: "80/tcp", verdict: Allow, address: "fd00:96::40",
			backends: []string{"x/web-1:8080 allow", "x/web-2:9090 allow"}},
		{name: "partly allowed backends", policies: []*policyapi.NetworkPolicy{denyClosed},
			from: "x/client", to: "svc/x/gate", port: "80", verdict: Partial, address: "10.96.0.20",
			backends: []string{"x/web-1:80 allow", "x/web-2:80 deny", "x/web-3:80 allow"},
			reason:   "2 of 3 backends allow (x/web-1:80, x/web-3:80); x/web-2:80 denies: ingress of x/web-2: default deny: x/web-2 is isolated for ingress by x/deny-closed"},
		{name: "partly allowed: the closed backend's own client too", policies: []*policyapi.NetworkPolicy{denyClosed},
			from: "x/web-2", to: "10.96.0.20", port: "80", verdict: Partial,
			backends: []string{"x/web-1:80 allow", "x/web-2:80 deny", "x/web-3:80 allow"}},
		{name: "no backend: refused", from: "x/client", to: "svc/x/nobody", port: "80", verdict: Refused, address: "10.96.0.51",
			reason: "x/nobody has no ready endpoint for 80/TCP over IPv4, so the connection is refused before any policy judges it"},
		{name: "no backend: refused over UDP too, from an isolated pod", policies: []*policyapi.NetworkPolicy{isolated},
			from: "x/client", to: "10.96.0.51", port: "53/udp", verdict: Refused, reason: "no ready endpoint for 53/UDP"},
		{name: "a selected pod without an address is no endpoint", from: "x/client", to: "svc/x/unready", port: "80", verdict: Refused,
			reason: "its selector picks x/pending, without an IPv4 address"},
		{name: "DNS-style egress: UDP 53 to the Service is allowed", policies: []*policyapi.NetworkPolicy{clientDNS},
			from: "x/client", to: "svc/x/dns", port: "53/udp", verdict: Allow, address: "10.96.0.10",
			backends: []string{"x/dns:53 allow"}, reason: "via backend x/dns:53: allowed: allowed by x/client-dns egress[0]"},
		{name: "DNS-style egress: TCP 53 to the Service is not", policies: []*policyapi.NetworkPolicy{clientDNS},
			from: "x/client", to: "10.96.0.10", port: "53", verdict: Deny,
			backends: []string{"x/dns:53 deny"}, reason: "via backend x/dns:53: egress of x/client: default deny"},
		{name: "DNS-style egress: nothing else through a Service", policies: []*policyapi.NetworkPolicy{clientDNS},
			from: "x/client", to: "svc/x/gate", port: "80", verdict: Deny,
			backends: []string{"x/web-1:80 deny", "x/web-2:80 deny", "x/web-3:80 deny"}, reason: "no backend allows"},
		{name: "an outside client reaching a ClusterIP is judged on the backends", policies: []*policyapi.NetworkPolicy{denyClosed},
			from: "192.0.2.1", to: "10.96.0.20", port: "80", verdict: Partial,
			backends: []string{"x/web-1:80 allow", "x/web-2:80 deny", "x/web-3:80 allow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := query(t, tc.from, tc.to, tc.port)
			q.Family = tc.family
			res, err := Explain(serviceFixture(tc.policies...), q)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict {
				t.Errorf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.verdict)
			}
			if tc.address != "" && res.To.Address != tc.address {
				t.Errorf("translated %s, want %s", res.To.Address, tc.address)
			}
			if res.To.Service == "" || res.To.Pod != "" {
				t.Errorf("to %+v, want a Service", res.To)
			}
			var got []string
			for _, b := range res.Backends {
				got = append(got, backendName(b)+" "+b.Verdict)
				if b.Verdict == Deny && b.Egress.Verdict == Allow && b.Ingress.Verdict == Allow {
					t.Errorf("backend %s denied with both sides allowing", backendName(b))
				}
				if b.From.Address == "" || familyOf(mustAddr(t, b.From.Address)) != familyOf(mustAddr(t, res.To.Address)) {
					t.Errorf("backend %s judged from %q, want the client's address of the ClusterIP's family", backendName(b), b.From.Address)
				}
			}
			if !slices.Equal(got, tc.backends) {
				t.Errorf("backends %v, want %v", got, tc.backends)
			}
			if !strings.Contains(res.Reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", res.Reason, tc.reason)
			}
		})
	}
}

// TestExplainServiceReadiness: only ready endpoints are backends, and
// serving terminating ones only when none is ready, as the compiler
// (and kube-proxy) pick them.
func TestExplainServiceReadiness(t *testing.T) {
	yes, no := true, false
	port, name, tcp := int32(80), "", policyapi.TCP
	slice := func(conds ...policyapi.EndpointConditions) *policyapi.EndpointSlice {
		s := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "gate-1", Labels: map[string]string{policyapi.ServiceNameLabel: "gate"}},
			AddressType: policyapi.AddressTypeIPv4, Ports: []policyapi.EndpointSlicePort{{Name: &name, Protocol: &tcp, Port: &port}}}
		for i, c := range conds {
			s.Endpoints = append(s.Endpoints, policyapi.SliceEndpoint{Addresses: []string{[]string{"10.0.1.11", "10.0.1.12"}[i]}, Conditions: c})
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		slice    *policyapi.EndpointSlice
		verdict  string
		backends int
	}{
		{"one ready, one not", slice(policyapi.EndpointConditions{Ready: &yes}, policyapi.EndpointConditions{Ready: &no}), Allow, 1},
		{"none ready: refused", slice(policyapi.EndpointConditions{Ready: &no}, policyapi.EndpointConditions{Ready: &no}), Refused, 0},
		{"none ready, one terminating and serving", slice(policyapi.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}, policyapi.EndpointConditions{Ready: &no}), Allow, 1},
	} {
		s := serviceFixture()
		s.EndpointSlices = []*policyapi.EndpointSlice{tc.slice}
		res, err := Explain(s, query(t, "x/client", "svc/x/gate", "80"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Verdict != tc.verdict || len(res.Backends) != tc.backends {
			t.Errorf("%s: %s with %d backends, want %s with %d", tc.name, res.Verdict, len(res.Backends), tc.verdict, tc.backends)
		}
	}
}

// TestExplainServiceInternalLocal: under internalTrafficPolicy Local the
// backends are those on the client pod's node (in Kubernetes mode, a
// snapshot with a Node), and without any there the connection is denied
// as dropped; standalone (no Node) every endpoint is local.
func TestExplainServiceInternalLocal(t *testing.T) {
	yes, port, name, tcp := true, int32(80), "", policyapi.TCP
	local := policyapi.ServiceInternalTrafficPolicyLocal
	for _, tc := range []struct {
		name, snapNode, clientNode string
		verdict, reason            string
		backends                   int
	}{
		{"client on the endpoint's node", "n1", "n2", Allow, "", 1},
		{"client on another node: dropped", "n1", "n1", Deny, "no local backend: x/gate has internalTrafficPolicy Local and no ready endpoint on node n1", 0},
		{"the agent's node for a client without one", "n2", "", Allow, "", 1},
		{"standalone: every endpoint is local", "", "n1", Allow, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serviceFixture()
			s.Node = tc.snapNode
			for _, svc := range s.Services {
				if svc.Name == "gate" {
					svc.Spec.InternalTrafficPolicy = &local
				}
			}
			for _, p := range s.Pods {
				if p.Name == "client" {
					p.Spec.NodeName = tc.clientNode
				}
			}
			s.EndpointSlices = []*policyapi.EndpointSlice{{
				ObjectMeta:  policyapi.ObjectMeta{Namespace: "x", Name: "gate-1", Labels: map[string]string{policyapi.ServiceNameLabel: "gate"}},
				AddressType: policyapi.AddressTypeIPv4, Ports: []policyapi.EndpointSlicePort{{Name: &name, Protocol: &tcp, Port: &port}},
				Endpoints: []policyapi.SliceEndpoint{{Addresses: []string{"10.0.1.11"}, Conditions: policyapi.EndpointConditions{Ready: &yes}, NodeName: ptr("n2")}},
			}}
			res, err := Explain(s, query(t, "x/client", "svc/x/gate", "80"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict || len(res.Backends) != tc.backends || !strings.Contains(res.Reason, tc.reason) {
				t.Errorf("%s with %d backends (%s), want %s with %d mentioning %q", res.Verdict, len(res.Backends), res.Reason, tc.verdict, tc.backends, tc.reason)
			}
		})
	}
}

// TestExplainServiceTopologyHints: zone hints pick the backends for a
// client of this node (or with no node) in this node's zone; a pod of
// another node, whose zone the agent does not know, gets every endpoint.
func TestExplainServiceTopologyHints(t *testing.T) {
	yes, port, name, tcp := true, int32(80), "", policyapi.TCP
	hinted := func(addr, zone string) policyapi.SliceEndpoint {
		return policyapi.SliceEndpoint{Addresses: []string{addr}, Conditions: policyapi.EndpointConditions{Ready: &yes},
			Hints: &policyapi.EndpointHints{ForZones: []policyapi.ForZone{{Name: zone}}}}
	}
	for _, tc := range []struct {
		name, clientNode string
		backends         []string
	}{
		{"client on this node (zone a)", "n1", []string{"10.0.1.11"}},
		{"client without a node: this node's zone", "", []string{"10.0.1.11"}},
		{"client on another node: zone unknown, every endpoint", "n2", []string{"10.0.1.11", "10.0.1.12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serviceFixture()
			s.Node, s.Zone = "n1", "a"
			for _, p := range s.Pods {
				if p.Name == "client" {
					p.Spec.NodeName = tc.clientNode
				}
			}
			s.EndpointSlices = []*policyapi.EndpointSlice{{
				ObjectMeta:  policyapi.ObjectMeta{Namespace: "x", Name: "gate-1", Labels: map[string]string{policyapi.ServiceNameLabel: "gate"}},
				AddressType: policyapi.AddressTypeIPv4, Ports: []policyapi.EndpointSlicePort{{Name: &name, Protocol: &tcp, Port: &port}},
				Endpoints: []policyapi.SliceEndpoint{hinted("10.0.1.11", "a"), hinted("10.0.1.12", "b")},
			}}
			res, err := Explain(s, query(t, "x/client", "svc/x/gate", "80"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range res.Backends {
				got = append(got, b.To.Address)
			}
			if !slices.Equal(got, tc.backends) {
				t.Errorf("backends %v, want %v", got, tc.backends)
			}
		})
	}
}

func TestExplainServiceErrors(t *testing.T) {
	snap := serviceFixture()
	headless := service("x", "headless", []string{policyapi.ClusterIPNone}, map[string]string{"app": "web"}, svcPort("", "", 80, nil))
	other := service("x", "other", []string{"10.96.0.60"}, map[string]string{"app": "web"}, svcPort("", "", 80, nil))
	other.Labels = map[string]string{policyapi.ServiceProxyNameLabel: "mesh"}
	exposed := service("x", "exposed", []string{"10.96.0.61"}, map[string]string{"app": "web"}, svcPort("", "", 80, nil))
	exposed.Spec.Type, exposed.Spec.Ports[0].NodePort = policyapi.ServiceTypeLoadBalancer, 30080
	exposed.Spec.ExternalIPs = []string{"198.51.100.10"}
	exposed.Status.LoadBalancer.Ingress = []policyapi.LoadBalancerIngress{{IP: "198.51.100.20"}}
	// An externalIP on another Service's ClusterIP, on a port that one
	// does not have: the frontend is external.
	squat := service("x", "squat", []string{"10.96.0.62"}, map[string]string{"app": "web"}, svcPort("", "", 81, nil))
	squat.Spec.ExternalIPs = []string{"10.96.0.61"}
	snap.Services = append(snap.Services, headless, other, exposed, squat)
	snap.NodeAddrs = []netip.Addr{netip.MustParseAddr("192.168.0.11")}
	for _, tc := range []struct {
		from, to, port string
		family         int
		want           error
		text           string
	}{
		{"x/client", "svc/x/web", "8080", 0, ErrServiceAddress, "service x/web has no port 8080/TCP (its ports: 80/TCP); --port is a Service port"},
		{"x/client", "10.96.0.10", "53/sctp", 0, ErrServiceAddress, "its ports: 53/UDP, 53/TCP"},
		{"x/client", "svc/x/nothing", "80", 0, ErrUnknownService, "the Services of namespace x are dns, exposed, gate, headless, nobody, other, squat, unready, web"},
		{"x/client", "198.51.100.10", "80", 0, ErrServiceAddress, "on 80/TCP it is an externalIP, load-balancer IP or NodePort of service x/exposed"},
		{"x/client", "198.51.100.20", "80", 0, ErrServiceAddress, "NodePort of service x/exposed"},
		{"x/client", "192.168.0.11", "30080", 0, ErrServiceAddress, "NodePort of service x/exposed"},
		{"x/client", "10.96.0.61", "81", 0, ErrServiceAddress, "NodePort of service x/squat"},
		{"x/client", "10.96.0.60", "80", 0, ErrServiceAddress, `service x/other is labelled service.kubernetes.io/service-proxy-name="mesh": that proxy translates it`},
		{"x/client", "svc/y/web", "80", 0, ErrUnknownService, "the Services of namespace y are none"},
		{"x/client", "svc/x/headless", "80", 0, ErrServiceAddress, "headless or ExternalName"},
		{"x/client", "svc/x/gate", "80", 6, ErrServiceAddress, "no IPv6 ClusterIP"},
		{"svc/x/web", "x/client", "80", 0, ErrServiceAddress, "a Service opens no connections"},
	} {
		q := query(t, tc.from, tc.to, tc.port)
		q.Family = tc.family
		_, err := Explain(snap, q)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s -> %s on %s: %v, want %v mentioning %q", tc.from, tc.to, tc.port, err, tc.want, tc.text)
		}
	}
	// On a port the Service does not have, the address is no frontend.
	if _, err := Explain(snap, query(t, "x/client", "198.51.100.10", "81")); err != nil {
		t.Errorf("x/client -> 198.51.100.10 on 81: %v, want an answer (not a Service port)", err)
	}
	// A pod of another node reaching this node's NodePort is not
	// translated on its own node: an address like any other.
	snap.Node = "n1"
	for _, p := range snap.Pods {
		if p.Name == "client" {
			p.Spec.NodeName = "n2"
		}
	}
	if _, err := Explain(snap, query(t, "x/client", "192.168.0.11", "30080")); err != nil {
		t.Errorf("x/client of node n2 -> 192.168.0.11 on 30080: %v, want an answer (n2 translates no NodePort of n1's address)", err)
	}
	if _, err := Explain(snap, query(t, "x/client", "198.51.100.20", "80")); !errors.Is(err, ErrServiceAddress) {
		t.Errorf("x/client of node n2 -> 198.51.100.20 on 80: %v, want %v (a load-balancer IP is translated on every node)", err, ErrServiceAddress)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestExplainServiceOverCapacity: a namespace whose Services the node's
// Service maps cannot hold is left to kube-proxy; explain says so, with
// the reason, rather than judging backends the dataplanes do not pick
// from. The other namespaces' Services are answered as before.
func TestExplainServiceOverCapacity(t *testing.T) {
	snap := serviceFixture()
	var ports []policyapi.ServicePort
	for i := range 10 {
		ports = append(ports, svcPort(fmt.Sprintf("p%d", i), "", int32(80+i), nil))
	}
	snap.Services = append(snap.Services, service("hog", "big", []string{"10.96.0.70"}, nil, ports...))
	if _, err := Explain(snap, query(t, "x/client", "10.96.0.70", "80")); err != nil {
		t.Fatalf("within the default limits: %v", err)
	}
	snap.Limits = policy.Limits{ServiceFrontends: 12} // namespace x holds 8
	_, err := Explain(snap, query(t, "x/client", "10.96.0.70", "80"))
	if !errors.Is(err, ErrServiceAddress) || !strings.Contains(err.Error(), "lockstep does not translate service hog/big for the pods of this node (the Services of all namespaces ask for more than the node's Service maps hold (12 frontends), and namespace hog's for 10 frontends") {
		t.Errorf("hog/big over capacity: %v", err)
	}
	// A frontend of more backends than the maps hold for one.
	snap.Limits = policy.DefaultLimits
	many := make([]policyapi.SliceEndpoint, policy.MaxBackendsPerFrontend+1)
	for i := range many {
		many[i] = policyapi.SliceEndpoint{Addresses: []string{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()}}
	}
	name, port := "p0", int32(8080)
	snap.EndpointSlices = append(snap.EndpointSlices, &policyapi.EndpointSlice{
		ObjectMeta:  policyapi.ObjectMeta{Namespace: "hog", Name: "big-1", Labels: map[string]string{policyapi.ServiceNameLabel: "big"}},
		AddressType: policyapi.AddressTypeIPv4, Ports: []policyapi.EndpointSlicePort{{Name: &name, Port: &port}}, Endpoints: many,
	})
	_, err = Explain(snap, query(t, "x/client", "10.96.0.70", "81"))
	if !errors.Is(err, ErrServiceAddress) || !strings.Contains(err.Error(), "namespace hog has a Service frontend of more than 65533 backends") {
		t.Errorf("hog/big with a frontend of too many backends: %v", err)
	}
	if _, err := Explain(snap, query(t, "x/client", "svc/x/web", "80")); err != nil {
		t.Errorf("x/web while hog is over capacity: %v", err)
	}
}
