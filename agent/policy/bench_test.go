package policy

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchSnapshot builds the lead's benchmark cluster: 50 namespaces of 20
// apps with 10 pods each (10k pods, 1k identities), 1k policies (one per
// app: ingress from a sibling app and a namespace, egress to DNS by named
// port and to an ipBlock with excepts) and 20 local endpoints.
func benchSnapshot(tb testing.TB) *Snapshot {
	const namespaces, apps, replicas, locals = 50, 20, 10, 20
	s := &Snapshot{Namespaces: map[string]*Namespace{}, Identities: map[string]Peer{}}
	n := 0
	for i := range namespaces {
		ns := fmt.Sprintf("ns%d", i)
		s.Namespaces[ns] = mkNS(ns, "team", fmt.Sprintf("t%d", i%5))
		for j := range apps {
			app := fmt.Sprintf("app%d", j)
			for k := range replicas {
				a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
				p := withPorts(mkPod(ns, fmt.Sprintf("%s-%d", app, k), ips(a.String()), "app", app, "tier", fmt.Sprint(j%3)),
					ContainerPort{Name: "http", ContainerPort: 8000 + int32(j)}, ContainerPort{Name: "dns", ContainerPort: 53, Protocol: UDP})
				s.Pods = append(s.Pods, p)
				key := IdentityKey(s.Namespaces[ns], p)
				if _, ok := s.Identities[key]; !ok {
					s.Identities[key] = FirstPodIdentity + Peer(len(s.Identities))
				}
				if len(s.Local) < locals && n%500 == 0 {
					s.Local = append(s.Local, LocalEndpoint{HostIfName: fmt.Sprintf("lxc%d", n), Namespace: ns, PodName: p.Name, IPv4: a})
				}
				n++
			}
			s.Policies = append(s.Policies, mkPolicy(ns, app, sel("app", app), NetworkPolicySpec{
				Ingress: []IngressRule{{
					Ports: []NetworkPolicyPort{named("http"), {Port: FromInt(9000), EndPort: ptr[int32](9100)}},
					From: []NetworkPolicyPeer{
						{PodSelector: sel("app", fmt.Sprintf("app%d", (j+1)%apps))},
						{NamespaceSelector: sel("team", fmt.Sprintf("t%d", j%5)), PodSelector: &LabelSelector{
							MatchExpressions: []LabelSelectorRequirement{{Key: "tier", Operator: OpIn, Values: []string{"0", "1"}}}}},
					},
				}},
				Egress: []EgressRule{
					{Ports: []NetworkPolicyPort{{Protocol: ptr(UDP), Port: FromString("dns")}}, To: []NetworkPolicyPeer{{NamespaceSelector: &LabelSelector{}}}},
					{Ports: []NetworkPolicyPort{tcp(443)}, To: []NetworkPolicyPeer{{IPBlock: &IPBlock{
						CIDR: fmt.Sprintf("172.%d.0.0/16", 16+j), Except: []string{fmt.Sprintf("172.%d.%d.0/24", 16+j, i)}}}}},
					{To: []NetworkPolicyPeer{{PodSelector: sel("tier", "2")}}},
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
