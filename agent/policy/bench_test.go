package policy

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// benchSnapshot builds the lead's benchmark cluster: 50 namespaces of 20
// apps with 10 pods each (10k pods, 1k identities), 1k policies (one per
// app: ingress from a sibling app and a namespace, egress to DNS by named
// port and to an ipBlock with excepts) and 20 local endpoints.
func benchSnapshot(tb testing.TB) *Snapshot {
	const namespaces, apps, replicas, locals = 50, 20, 10, 20
	s := &Snapshot{Namespaces: map[string]*policyapi.Namespace{}, Identities: map[string]policyapi.Peer{}}
	n := 0
	for i := range namespaces {
		ns := fmt.Sprintf("ns%d", i)
		s.Namespaces[ns] = mkNS(ns, "team", fmt.Sprintf("t%d", i%5))
		for j := range apps {
			app := fmt.Sprintf("app%d", j)
			for k := range replicas {
				a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
				p := withPorts(mkPod(ns, fmt.Sprintf("%s-%d", app, k), ips(a.String()), "app", app, "tier", fmt.Sprint(j%3)),
					policyapi.ContainerPort{Name: "http", ContainerPort: 8000 + int32(j)}, policyapi.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP})
				s.Pods = append(s.Pods, p)
				key := policyapi.IdentityKey(s.Namespaces[ns], p)
				if _, ok := s.Identities[key]; !ok {
					s.Identities[key] = policyapi.FirstPodIdentity + policyapi.Peer(len(s.Identities))
				}
				if len(s.Local) < locals && n%500 == 0 {
					s.Local = append(s.Local, LocalEndpoint{HostIfName: fmt.Sprintf("lxc%d", n), Namespace: ns, PodName: p.Name, IPv4: a})
				}
				n++
			}
			s.Policies = append(s.Policies, mkPolicy(ns, app, sel("app", app), policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{
					Ports: []policyapi.NetworkPolicyPort{named("http"), {Port: policyapi.FromInt(9000), EndPort: ptr[int32](9100)}},
					From: []policyapi.NetworkPolicyPeer{
						{PodSelector: sel("app", fmt.Sprintf("app%d", (j+1)%apps))},
						{NamespaceSelector: sel("team", fmt.Sprintf("t%d", j%5)), PodSelector: &policyapi.LabelSelector{
							MatchExpressions: []policyapi.LabelSelectorRequirement{{Key: "tier", Operator: policyapi.OpIn, Values: []string{"0", "1"}}}}},
					},
				}},
				Egress: []policyapi.EgressRule{
					{Ports: []policyapi.NetworkPolicyPort{{Protocol: ptr(policyapi.UDP), Port: policyapi.FromString("dns")}}, To: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{}}}},
					{Ports: []policyapi.NetworkPolicyPort{tcp(443)}, To: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{
						CIDR: fmt.Sprintf("172.%d.0.0/16", 16+j), Except: []string{fmt.Sprintf("172.%d.%d.0/24", 16+j, i)}}}}},
					{To: []policyapi.NetworkPolicyPeer{{PodSelector: sel("tier", "2")}}},
				},
			}))
		}
	}
	if len(s.Pods) != 10000 || len(s.Policies) != 1000 || len(s.Local) != locals {
		tb.Fatalf("built %d pods, %d policies, %d local", len(s.Pods), len(s.Policies), len(s.Local))
	}
	return s
}

func BenchmarkCompile(b *testing.B) {
	s := benchSnapshot(b)
	b.ReportAllocs()
	var d *Desired
	for b.Loop() {
		var err error
		if d, err = Compile(s); err != nil {
			b.Fatal(err)
		}
	}
	rules := 0
	for _, ep := range d.Endpoints {
		rules += len(ep.Rules)
	}
	b.ReportMetric(float64(len(d.Addrs)), "addrs")
	b.ReportMetric(float64(len(d.CIDRs)), "cidrs")
	b.ReportMetric(float64(rules), "rules")
}

// feedIncremental gives inc every object of s.
func feedIncremental(inc *Incremental, s *Snapshot) {
	for _, ns := range s.Namespaces {
		inc.SetNamespace(ns)
	}
	for k, id := range s.Identities {
		inc.SetIdentity(k, id)
	}
	for _, p := range s.Pods {
		inc.SetPod(p)
	}
	for _, np := range s.Policies {
		inc.SetPolicy(np)
	}
	inc.SetLocal(s.Local)
}

// BenchmarkIncrementalFirst is the first compilation of an Incremental:
// what the agent pays once at start (compare BenchmarkCompile). state-KB
// is the heap the compiler keeps afterwards, its result included (a full
// Compile keeps only its result, result-KB).
func BenchmarkIncrementalFirst(b *testing.B) {
	s := benchSnapshot(b)
	b.ReportAllocs()
	for b.Loop() {
		inc := NewIncremental()
		feedIncremental(inc, s)
		if _, err := inc.Compile(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	retained := func(build func() any) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		keep := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024
	}
	b.ReportMetric(retained(func() any {
		d, err := Compile(s)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}), "result-KB")
	b.ReportMetric(retained(func() any {
		inc := NewIncremental()
		feedIncremental(inc, s)
		if _, err := inc.Compile(); err != nil {
			b.Fatal(err)
		}
		return inc
	}), "state-KB")
}

// BenchmarkIncrementalPolicyEdit is one policy edit (a port range of a
// policy selecting a local endpoint) and the compilation after it.
func BenchmarkIncrementalPolicyEdit(b *testing.B) {
	s := benchSnapshot(b)
	inc := NewIncremental()
	feedIncremental(inc, s)
	if _, err := inc.Compile(); err != nil {
		b.Fatal(err)
	}
	// The policies selecting the local endpoints' pods.
	var edit []*policyapi.NetworkPolicy
	for _, le := range s.Local {
		for _, np := range s.Policies {
			if np.Namespace == le.Namespace && np.Spec.PodSelector.MatchLabels["app"] == strings.Split(le.PodName, "-")[0] {
				edit = append(edit, np)
			}
		}
	}
	if len(edit) == 0 {
		b.Fatal("no policy selects a local endpoint")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		np := *edit[i%len(edit)]
		np.Spec.Ingress = slices.Clone(np.Spec.Ingress)
		np.Spec.Ingress[0].Ports = []policyapi.NetworkPolicyPort{named("http"), {Port: policyapi.FromInt(9000), EndPort: ptr(int32(9100 + i%500))}}
		inc.SetPolicy(&np)
		d, err := inc.Compile()
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Endpoints) != len(s.Local) {
			b.Fatalf("%d endpoints", len(d.Endpoints))
		}
		i++
	}
}

// BenchmarkIncrementalPodChurn is a remote pod leaving and coming back
// with the same labels: the address changes, the identity stays.
func BenchmarkIncrementalPodChurn(b *testing.B) {
	s := benchSnapshot(b)
	inc := NewIncremental()
	feedIncremental(inc, s)
	if _, err := inc.Compile(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := s.Pods[(i*7919)%len(s.Pods)]
		if i%2 == 0 {
			inc.DeletePod(p.Namespace, p.Name)
		} else {
			inc.SetPod(p)
		}
		if _, err := inc.Compile(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkIncrementalNewIdentity is a pod with a label set of its own
// appearing and leaving: a new identity every selector must consider.
func BenchmarkIncrementalNewIdentity(b *testing.B) {
	s := benchSnapshot(b)
	inc := NewIncremental()
	feedIncremental(inc, s)
	if _, err := inc.Compile(); err != nil {
		b.Fatal(err)
	}
	ns := s.Namespaces["ns3"]
	p := withPorts(mkPod("ns3", "odd", ips("10.200.0.1"), "app", "odd", "tier", "2"), policyapi.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP})
	inc.SetIdentity(policyapi.IdentityKey(ns, p), policyapi.FirstPodIdentity+policyapi.Peer(len(s.Identities)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			inc.SetPod(p)
		} else {
			inc.DeletePod(p.Namespace, p.Name)
		}
		if _, err := inc.Compile(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkServiceOfManyPorts is one tenant's Service of 16400 ports
// (about what one object of 1.5 MiB, etcd's limit, holds), its slice
// carrying them all, compiled alone: what each change of it costs the
// agent. A slice port is read once per
// Service, not once per Service port, and duplicate ports are found by
// lookup, so the cost grows with the ports, not with their square
// (`go test -run XXX -bench ServiceOfManyPorts ./agent/policy`, 2-CPU
// host: 4.2 s per compile before, 0.13 s after).
func BenchmarkServiceOfManyPorts(b *testing.B) {
	const n = 16400
	svc := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "hog", Name: "big"}, Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.20"}}
	sl := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: "hog", Name: "big-1", Labels: map[string]string{policyapi.ServiceNameLabel: "big"}},
		AddressType: policyapi.AddressTypeIPv4, Endpoints: []policyapi.SliceEndpoint{{Addresses: []string{"10.1.0.1"}}}}
	for i := range n {
		name, port := fmt.Sprintf("p%d", i), int32(8080)
		svc.Spec.Ports = append(svc.Spec.Ports, policyapi.ServicePort{Name: name, Port: int32(1 + i), Protocol: policyapi.TCP})
		sl.Ports = append(sl.Ports, policyapi.EndpointSlicePort{Name: &name, Port: &port})
	}
	s := &Snapshot{Services: []*policyapi.Service{svc}, EndpointSlices: []*policyapi.EndpointSlice{sl}, Limits: DefaultLimits}
	b.ReportAllocs()
	for b.Loop() {
		d, err := Compile(s)
		if err != nil || len(d.Services) != n {
			b.Fatalf("%d frontends, %v", len(d.Services), err)
		}
	}
}
