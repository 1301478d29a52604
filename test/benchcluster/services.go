package benchcluster

import (
	"fmt"
	"net/netip"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ServicePort is the port of every Service of the cluster; its target is
// the pods' named port "http".
const ServicePort = 80

// ServiceIndex numbers the Service of app j in namespace i: 0 to
// Namespaces*Apps-1.
func ServiceIndex(i, j int) int { return i*Apps + j }

// ServiceIP is the ClusterIP of Service n (ServiceIndex), in 10.96.0.0/16.
func ServiceIP(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 96, byte((n + 1) >> 8), byte(n + 1)})
}

// AddServices gives every app a ClusterIP Service selecting its pods, and
// each Service the EndpointSlice the API server's controller would write:
// the app's Replicas pods, ready, on the app's http port.
func (c *Cluster) AddServices() {
	for i := range Namespaces {
		for j := range Apps {
			n := ServiceIndex(i, j)
			ns, app := NsName(i), AppName(j)
			c.Services = append(c.Services, &policyapi.Service{
				TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Service"},
				ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: app},
				Spec: policyapi.ServiceSpec{
					Type:      policyapi.ServiceTypeClusterIP,
					ClusterIP: ServiceIP(n).String(), ClusterIPs: []string{ServiceIP(n).String()},
					Ports:    []policyapi.ServicePort{{Protocol: policyapi.TCP, Port: ServicePort, TargetPort: policyapi.FromString("http")}},
					Selector: map[string]string{"app": app},
				},
			})
			var addrs []netip.Addr
			for k := range Replicas {
				p := c.Pods[n*Replicas+k]
				addrs = append(addrs, netip.MustParseAddr(p.Status.PodIP))
			}
			c.EndpointSlices = append(c.EndpointSlices, AppSlice(i, j, addrs))
		}
	}
}

// AppSlice is the EndpointSlice of app j's Service in namespace i with
// the given ready endpoints.
func AppSlice(i, j int, addrs []netip.Addr) *policyapi.EndpointSlice {
	ns, app := NsName(i), AppName(j)
	s := &policyapi.EndpointSlice{
		TypeMeta:    policyapi.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  policyapi.ObjectMeta{Namespace: ns, Name: app + "-abcde", Labels: map[string]string{policyapi.ServiceNameLabel: app}},
		AddressType: policyapi.AddressTypeIPv4,
		Ports:       []policyapi.EndpointSlicePort{{Name: ptr(""), Protocol: ptr(policyapi.TCP), Port: ptr(int32(8000 + j))}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, policyapi.SliceEndpoint{Addresses: []string{a.String()}})
	}
	return s
}

// ReplacedBackend returns the EndpointSlice of Service n with one backend
// replaced by a new pod, as a rolling update does: the v-th change
// replaces endpoint v%Replicas with an address no other change uses (in
// 10.3.0.0/16). cur is the slice's current endpoints' addresses; it is
// updated.
func ReplacedBackend(n, v int, cur []netip.Addr) *policyapi.EndpointSlice {
	if v >= 1<<16 {
		panic(fmt.Sprintf("benchcluster: backend change %d: at most %d", v, 1<<16))
	}
	cur[v%len(cur)] = netip.AddrFrom4([4]byte{10, 3, byte(v >> 8), byte(v)})
	return AppSlice(n/Apps, n%Apps, cur)
}

func ptr[T any](v T) *T { return &v }
