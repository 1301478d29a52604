package endpointslice

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ManagedByLabel and ManagedBy mark the slices this controller writes, as
// Kubernetes' controller marks its own.
const (
	ManagedByLabel = "endpointslice.kubernetes.io/managed-by"
	ManagedBy      = "standalone.lockstep.dev"
)

// Pod is a pod as the controller sees it: its object and the addresses it
// has now.
type Pod struct {
	Object *policyapi.Pod
	Addrs  []netip.Addr
}

// Slices returns the EndpointSlices of svc given every pod (see the package
// documentation), sorted by name; nil when svc has none. Slices are named
// after the Service, the family and a hash of their ports, so the same
// endpoints give the same slices.
func Slices(svc *policyapi.Service, pods []Pod) []*policyapi.EndpointSlice {
	if svc.Spec.Type == policyapi.ServiceTypeExternalName || len(svc.Spec.Selector) == 0 {
		return nil
	}
	var families []policyapi.AddressType
	for _, ip := range clusterIPs(svc) {
		if a, err := netip.ParseAddr(ip); err == nil {
			families = append(families, family(a))
		}
	}
	if len(families) == 0 {
		return nil // headless: nothing to translate
	}
	// Endpoints by family and by the ports they resolve to.
	type group struct {
		ports []policyapi.EndpointSlicePort
		addrs []netip.Addr
	}
	groups := map[policyapi.AddressType]map[string]*group{}
	for _, p := range pods {
		pod := p.Object
		if objNamespace(pod.Namespace) != objNamespace(svc.Namespace) || !selects(svc.Spec.Selector, pod.Labels) ||
			pod.Status.Phase == policyapi.PodSucceeded || pod.Status.Phase == policyapi.PodFailed {
			continue
		}
		ports := endpointPorts(svc, pod)
		sig := signature(ports)
		for _, fam := range families {
			i := slices.IndexFunc(p.Addrs, func(a netip.Addr) bool { return family(a) == fam })
			if i < 0 {
				continue
			}
			if groups[fam] == nil {
				groups[fam] = map[string]*group{}
			}
			g := groups[fam][sig]
			if g == nil {
				g = &group{ports: ports}
				groups[fam][sig] = g
			}
			g.addrs = append(g.addrs, p.Addrs[i].Unmap())
		}
	}
	var out []*policyapi.EndpointSlice
	for fam, bySig := range groups {
		for sig, g := range bySig {
			slices.SortFunc(g.addrs, netip.Addr.Compare)
			g.addrs = slices.Compact(g.addrs)
			s := &policyapi.EndpointSlice{
				TypeMeta: policyapi.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
				ObjectMeta: policyapi.ObjectMeta{
					Namespace: svc.Namespace,
					Name:      sliceName(svc.Name, fam, sig),
					Labels:    map[string]string{policyapi.ServiceNameLabel: svc.Name, ManagedByLabel: ManagedBy},
				},
				AddressType: fam,
				Ports:       g.ports,
			}
			for _, a := range g.addrs {
				yes, no := true, false
				s.Endpoints = append(s.Endpoints, policyapi.SliceEndpoint{
					Addresses:  []string{a.String()},
					Conditions: policyapi.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
				})
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *policyapi.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// endpointPorts resolves each port of svc on pod, in the Service's order:
// the targetPort's number, or the number of the pod's container port of
// that name and the port's protocol. A port that does not resolve is left
// out, as Kubernetes' controller leaves it.
func endpointPorts(svc *policyapi.Service, pod *policyapi.Pod) []policyapi.EndpointSlicePort {
	out := []policyapi.EndpointSlicePort{}
	for _, sp := range svc.Spec.Ports {
		proto := cmp.Or(sp.Protocol, policyapi.TCP)
		port := sp.Port
		switch tp := sp.TargetPort; {
		case tp == nil || (!tp.IsString && tp.IntVal == 0):
		case !tp.IsString:
			port = tp.IntVal
		default:
			port = namedPort(pod, tp.StrVal, proto)
		}
		if port == 0 {
			continue
		}
		name := sp.Name
		out = append(out, policyapi.EndpointSlicePort{Name: &name, Protocol: &proto, Port: &port})
	}
	return out
}

// namedPort returns the number of pod's container port name of protocol
// proto, 0 when it declares none.
func namedPort(pod *policyapi.Pod, name string, proto policyapi.Protocol) int32 {
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name && cmp.Or(cp.Protocol, policyapi.TCP) == proto {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// signature is a key equal for equal port lists.
func signature(ports []policyapi.EndpointSlicePort) string {
	var b strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&b, "%s/%s/%d,", *p.Name, *p.Protocol, *p.Port)
	}
	return b.String()
}

// sliceName names a slice after its Service, family and ports.
func sliceName(svc string, fam policyapi.AddressType, sig string) string {
	h := fnv.New32a()
	h.Write([]byte(sig))
	return fmt.Sprintf("%s-%s-%08x", svc, strings.ToLower(string(fam)), h.Sum32())
}

func clusterIPs(svc *policyapi.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

func family(a netip.Addr) policyapi.AddressType {
	if a.Unmap().Is4() {
		return policyapi.AddressTypeIPv4
	}
	return policyapi.AddressTypeIPv6
}

// selects reports whether a Service's selector (every key with its value)
// matches labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// objNamespace is a namespaced object's namespace, "default" when it
// names none.
func objNamespace(ns string) string { return cmp.Or(ns, "default") }

// FromStatus returns the slices of every Service of svcs given pods at the
// addresses of their status, as the controller computes them for pods of
// other nodes: what `lockstep explain --manifests` and the probe translate
// a manifests directory's Services with, the pods at the addresses they
// pin or were given.
func FromStatus(svcs []*policyapi.Service, pods []*policyapi.Pod) []*policyapi.EndpointSlice {
	in := make([]Pod, len(pods))
	for i, p := range pods {
		in[i] = Pod{Object: p, Addrs: statusAddrs(p)}
	}
	var out []*policyapi.EndpointSlice
	for _, svc := range svcs {
		out = append(out, Slices(svc, in)...)
	}
	return out
}
