package endpointslice

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func svc(ns string, clusterIPs []string, selector map[string]string, ports ...policyapi.ServicePort) *policyapi.Service {
	s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyapi.ServiceSpec{ClusterIPs: clusterIPs, Selector: selector, Ports: ports}}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	return s
}

func port(name string, proto policyapi.Protocol, p int32, target *policyapi.IntOrString) policyapi.ServicePort {
	return policyapi.ServicePort{Name: name, Protocol: proto, Port: p, TargetPort: target}
}

// pod is pod ns/name with labels app=app, container ports "name:port/proto"
// and addresses.
func pod(ns, name, app string, ports []string, addrs ...string) Pod {
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}}}
	var cps []policyapi.ContainerPort
	for _, s := range ports {
		name, rest, _ := strings.Cut(s, ":")
		num, proto, _ := strings.Cut(rest, "/")
		cp := policyapi.ContainerPort{Name: name, Protocol: policyapi.Protocol(proto)}
		fmt.Sscan(num, &cp.ContainerPort)
		cps = append(cps, cp)
	}
	if len(cps) > 0 {
		p.Spec.Containers = []policyapi.Container{{Name: "c", Ports: cps}}
	}
	out := Pod{Object: p}
	for _, a := range addrs {
		out.Addrs = append(out.Addrs, netip.MustParseAddr(a))
	}
	return out
}

// render describes slices as "family [ports] addrs" lines, sorted, each
// endpoint checked to be ready, serving and not terminating.
func render(t *testing.T, sl []*policyapi.EndpointSlice) []string {
	t.Helper()
	var out []string
	for _, s := range sl {
		if s.Labels[policyapi.ServiceNameLabel] != "web" || s.Labels[ManagedByLabel] != ManagedBy || !strings.HasPrefix(s.Name, "web-") {
			t.Errorf("slice %s/%s labels %v", s.Namespace, s.Name, s.Labels)
		}
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", *p.Name, *p.Port, *p.Protocol))
		}
		var addrs []string
		for _, e := range s.Endpoints {
			c := e.Conditions
			if c.Ready == nil || !*c.Ready || c.Serving == nil || !*c.Serving || c.Terminating == nil || *c.Terminating {
				t.Errorf("slice %s endpoint %v conditions %+v, want ready and serving", s.Name, e.Addresses, c)
			}
			addrs = append(addrs, strings.Join(e.Addresses, "+"))
		}
		out = append(out, fmt.Sprintf("%s %v %v", s.AddressType, ports, addrs))
	}
	slices.Sort(out)
	return out
}

func TestSlices(t *testing.T) {
	web := map[string]string{"app": "web"}
	v4, dual := []string{"10.96.0.10"}, []string{"10.96.0.10", "fd00:96::10"}
	http := port("", "", 80, policyapi.FromInt(8080))
	tests := []struct {
		name string
		svc  *policyapi.Service
		pods []Pod
		want []string
	}{
		{
			name: "selector picks the pods of the Service's namespace; endpoints sorted",
			svc:  svc("prod", v4, web, http),
			pods: []Pod{
				pod("prod", "b", "web", nil, "10.244.0.9"),
				pod("prod", "a", "web", nil, "10.244.0.3"),
				pod("prod", "db", "db", nil, "10.244.0.4"),
				pod("test", "c", "web", nil, "10.244.0.5"),
			},
			want: []string{"IPv4 [:8080/TCP] [10.244.0.3 10.244.0.9]"},
		},
		{
			name: "a pod without an address is not ready: no endpoint",
			svc:  svc("prod", v4, web, http),
			pods: []Pod{pod("prod", "a", "web", nil), pod("prod", "b", "web", nil, "10.244.0.2")},
			want: []string{"IPv4 [:8080/TCP] [10.244.0.2]"},
		},
		{
			name: "finished pods are no endpoints",
			svc:  svc("prod", v4, web, http),
			pods: func() []Pod {
				done, failed := pod("prod", "a", "web", nil, "10.244.0.2"), pod("prod", "b", "web", nil, "10.244.0.3")
				done.Object.Status.Phase, failed.Object.Status.Phase = policyapi.PodSucceeded, policyapi.PodFailed
				return []Pod{done, failed, pod("prod", "c", "web", nil, "10.244.0.4")}
			}(),
			want: []string{"IPv4 [:8080/TCP] [10.244.0.4]"},
		},
		{
			name: "dual stack: one slice per family of the ClusterIPs, each pod's address of it",
			svc:  svc("prod", dual, web, http),
			pods: []Pod{
				pod("prod", "a", "web", nil, "10.244.0.2", "fd00:244::2"),
				pod("prod", "b", "web", nil, "fd00:244::3"),
				pod("prod", "c", "web", nil, "::ffff:10.244.0.4"),
			},
			want: []string{"IPv4 [:8080/TCP] [10.244.0.2 10.244.0.4]", "IPv6 [:8080/TCP] [fd00:244::2 fd00:244::3]"},
		},
		{
			name: "single stack IPv6 leaves IPv4 addresses out",
			svc:  svc("prod", []string{"fd00:96::10"}, web, http),
			pods: []Pod{pod("prod", "a", "web", nil, "10.244.0.2", "fd00:244::2"), pod("prod", "b", "web", nil, "10.244.0.3")},
			want: []string{"IPv6 [:8080/TCP] [fd00:244::2]"},
		},
		{
			name: "named target ports resolve per pod; pods resolving alike share a slice",
			svc: svc("prod", v4, web,
				port("http", policyapi.TCP, 80, policyapi.FromString("web")),
				port("dns", policyapi.UDP, 53, policyapi.FromString("dns")),
				port("metrics", "", 9090, nil)),
			pods: []Pod{
				pod("prod", "a", "web", []string{"web:8080/TCP", "dns:5353/UDP"}, "10.244.0.2"),
				pod("prod", "b", "web", []string{"web:8080", "dns:5353/UDP"}, "10.244.0.3"),
				pod("prod", "c", "web", []string{"web:9000/TCP"}, "10.244.0.4"),                 // no dns port
				pod("prod", "d", "web", []string{"web:8080/UDP", "dns:5353/TCP"}, "10.244.0.5"), // names of the other protocol
				pod("prod", "e", "web", []string{"other:8080/TCP", "dns:53/UDP"}, "10.244.0.6"), // no web port
			},
			want: []string{
				"IPv4 [dns:53/UDP metrics:9090/TCP] [10.244.0.6]",
				"IPv4 [http:8080/TCP dns:5353/UDP metrics:9090/TCP] [10.244.0.2 10.244.0.3]",
				"IPv4 [http:9000/TCP metrics:9090/TCP] [10.244.0.4]",
				"IPv4 [metrics:9090/TCP] [10.244.0.5]",
			},
		},
		{
			name: "no slices: headless, ExternalName, no selector",
			svc:  svc("prod", []string{"None"}, web, http),
			pods: []Pod{pod("prod", "a", "web", nil, "10.244.0.2")},
		},
		{
			name: "no slices: ExternalName",
			svc: func() *policyapi.Service {
				s := svc("prod", nil, web, http)
				s.Spec.Type = policyapi.ServiceTypeExternalName
				return s
			}(),
			pods: []Pod{pod("prod", "a", "web", nil, "10.244.0.2")},
		},
		{
			name: "no slices: no selector (endpoints managed by someone else)",
			svc:  svc("prod", v4, nil, http),
			pods: []Pod{pod("prod", "a", "web", nil, "10.244.0.2")},
		},
		{
			name: "the default namespace, named or not",
			svc:  svc("", v4, web, http),
			pods: []Pod{pod("default", "a", "web", nil, "10.244.0.2"), pod("", "b", "web", nil, "10.244.0.3")},
			want: []string{"IPv4 [:8080/TCP] [10.244.0.2 10.244.0.3]"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, Slices(tc.svc, tc.pods))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestSlicesCompile: what the controller writes, the compiler translates:
// the Service's frontends get the endpoints with the resolved ports.
func TestSlicesCompile(t *testing.T) {
	s := svc("prod", []string{"10.96.0.10", "fd00:96::10"}, map[string]string{"app": "web"},
		port("http", policyapi.TCP, 80, policyapi.FromString("web")), port("dns", policyapi.UDP, 53, policyapi.FromInt(5353)))
	pods := []Pod{
		pod("prod", "a", "web", []string{"web:8080/TCP"}, "10.244.0.2", "fd00:244::2"),
		pod("prod", "b", "web", []string{"web:9000/TCP"}, "10.244.0.3"),
		pod("prod", "c", "web", nil, "10.244.0.4"),
	}
	d, err := policy.Compile(&policy.Snapshot{Services: []*policyapi.Service{s}, EndpointSlices: Slices(s, pods)})
	if err != nil {
		t.Fatal(err)
	}
	b := func(s string) policy.ServiceBackend {
		ap := netip.MustParseAddrPort(s)
		return policy.ServiceBackend{Addr: ap.Addr(), Port: ap.Port()}
	}
	want := map[string][]policy.ServiceBackend{
		"10.96.0.10:80/6":   {b("10.244.0.2:8080"), b("10.244.0.3:9000")},
		"10.96.0.10:53/17":  {b("10.244.0.2:5353"), b("10.244.0.3:5353"), b("10.244.0.4:5353")},
		"fd00:96::10:80/6":  {b("[fd00:244::2]:8080")},
		"fd00:96::10:53/17": {b("[fd00:244::2]:5353")},
	}
	if len(d.Services) != len(want) {
		t.Errorf("%d frontends, want %d", len(d.Services), len(want))
	}
	for fe, e := range d.Services {
		key := fmt.Sprintf("%s:%d/%d", fe.Addr, fe.Port, fe.Proto)
		if !slices.Equal(e.Backends, want[key]) || e.Service != "prod/web" {
			t.Errorf("%s: %s %v, want prod/web %v", key, e.Service, e.Backends, want[key])
		}
	}
}

// TestFromStatus: the slices of manifests' Services, their pods at the
// addresses of their status (PodIPs, else PodIP): a pod without one is no
// endpoint yet, and each Service gets its own slices.
func TestFromStatus(t *testing.T) {
	withStatus := func(p Pod, ips ...string) *policyapi.Pod {
		o := *p.Object
		if len(ips) == 1 {
			o.Status.PodIP = ips[0]
		} else {
			for _, ip := range ips {
				o.Status.PodIPs = append(o.Status.PodIPs, policyapi.PodIP{IP: ip})
			}
		}
		return &o
	}
	pods := []*policyapi.Pod{
		withStatus(pod("x", "a", "web", []string{"http:8080/TCP"}), "10.0.0.1"),
		withStatus(pod("x", "b", "web", []string{"http:9090/TCP"}), "10.0.0.2", "fd00::2"),
		withStatus(pod("x", "c", "web", []string{"http:8080/TCP"})),
	}
	web := svc("x", []string{"10.96.0.1", "fd00:96::1"}, map[string]string{"app": "web"}, port("http", policyapi.TCP, 80, policyapi.FromString("http")))
	other := svc("x", []string{"10.96.0.2"}, map[string]string{"app": "none"}, port("http", policyapi.TCP, 80, nil))
	other.Name = "other"
	got := render(t, FromStatus([]*policyapi.Service{web, other}, pods))
	want := []string{"IPv4 [http:8080/TCP] [10.0.0.1]", "IPv4 [http:9090/TCP] [10.0.0.2]", "IPv6 [http:9090/TCP] [fd00::2]"}
	if !slices.Equal(got, want) {
		t.Errorf("slices %q, want %q", got, want)
	}
}
