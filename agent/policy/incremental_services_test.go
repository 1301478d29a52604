package policy

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The random world's Services and EndpointSlices: four names in each
// namespace, ClusterIPs from a handful (so two Services often claim one
// frontend), ports of two names, and slices whose labels, families, port
// names and conditions are as often wrong as right.
var (
	worldClusterIPs = [][]string{
		{"10.96.0.1"}, {"10.96.0.2"}, {"10.96.0.1", "fd00:96::1"}, {"fd00:96::1"}, {"fd00:96::2", "10.96.0.2"},
		{"None"}, nil,
	}
	worldSvcNames = []string{"s0", "s1", "s2", "s3"}
)

func (w *world) boolPtr() *bool {
	switch w.rng.IntN(3) {
	case 0:
		return nil
	case 1:
		v := true
		return &v
	}
	v := false
	return &v
}

func (w *world) service() *policyapi.Service {
	s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: w.pick(worldNamespaces[:3]), Name: w.pick(worldSvcNames)}}
	s.Spec.ClusterIPs = worldClusterIPs[w.rng.IntN(len(worldClusterIPs))]
	if len(s.Spec.ClusterIPs) > 0 && w.chance(0.5) {
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
	}
	if len(s.Spec.ClusterIPs) == 0 || w.chance(0.05) {
		s.Spec.Type = policyapi.ServiceTypeExternalName
	}
	names := []string{"http", "dns"}
	n := 1 + w.rng.IntN(2)
	first := w.rng.IntN(2)
	for i := range n {
		p := policyapi.ServicePort{Port: []int32{53, 80}[(first+i)%2], Protocol: []policyapi.Protocol{"", policyapi.TCP, policyapi.UDP}[w.rng.IntN(3)]}
		if n > 1 || w.chance(0.5) {
			p.Name = names[i]
		}
		if w.chance(0.3) {
			p.TargetPort = policyapi.FromInt(8080)
		}
		s.Spec.Ports = append(s.Spec.Ports, p)
	}
	if w.chance(0.005) {
		s.Spec.Ports = append(s.Spec.Ports, s.Spec.Ports[0]) // invalid: a duplicate
	}
	if w.chance(0.3) {
		s.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
		if w.chance(0.5) {
			t := int32(1 + w.rng.IntN(100))
			s.Spec.SessionAffinityConfig = &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: &t}}
		}
	}
	return s
}

func (w *world) slice() *policyapi.EndpointSlice {
	ns, svc := w.pick(worldNamespaces[:3]), w.pick(worldSvcNames)
	var target *policyapi.Service // mostly a slice of a Service that exists
	if keys := slices.SortedFunc(maps.Keys(w.services), compareObjKey); len(keys) > 0 && w.chance(0.7) {
		k := keys[w.rng.IntN(len(keys))]
		ns, svc, target = k.ns, k.name, w.services[k]
	}
	s := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, w.rng.IntN(3))}}
	if w.chance(0.9) {
		if w.chance(0.1) {
			svc = w.pick(worldSvcNames) // a slice whose name says another Service
		}
		s.Labels = map[string]string{policyapi.ServiceNameLabel: svc}
	}
	s.AddressType = []policyapi.AddressType{policyapi.AddressTypeIPv4, policyapi.AddressTypeIPv4, policyapi.AddressTypeIPv6, policyapi.AddressTypeFQDN}[w.rng.IntN(4)]
	for range w.rng.IntN(3) {
		var p policyapi.EndpointSlicePort
		name := []string{"", "http", "dns"}[w.rng.IntN(3)]
		proto := []policyapi.Protocol{policyapi.TCP, policyapi.UDP}[w.rng.IntN(2)]
		if target != nil && len(target.Spec.Ports) > 0 && w.chance(0.7) {
			sp := target.Spec.Ports[w.rng.IntN(len(target.Spec.Ports))]
			name, proto = sp.Name, cmp.Or(sp.Protocol, policyapi.TCP)
		}
		if name != "" || w.chance(0.8) {
			p.Name = &name
		}
		if proto != policyapi.TCP || w.chance(0.6) {
			p.Protocol = &proto
		}
		if w.chance(0.95) {
			port := []int32{53, 80, 8080}[w.rng.IntN(3)]
			p.Port = &port
		}
		s.Ports = append(s.Ports, p)
	}
	for range w.rng.IntN(4) {
		a := w.addr()
		if w.chance(0.8) { // mostly of the slice's family
			for (a.Is4() != (s.AddressType == policyapi.AddressTypeIPv4)) && s.AddressType != policyapi.AddressTypeFQDN {
				a = w.addr()
			}
		}
		e := policyapi.SliceEndpoint{Addresses: []string{a.String()}}
		if w.chance(0.05) {
			e.Addresses = nil
		}
		e.Conditions = policyapi.EndpointConditions{Ready: w.boolPtr(), Serving: w.boolPtr(), Terminating: w.boolPtr()}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// editService makes one change to the Services and slices.
func (w *world) editService() {
	switch n := w.rng.IntN(100); {
	case n < 2:
		w.limits = worldServiceLimits[w.rng.IntN(len(worldServiceLimits))]
		w.inc.SetLimits(w.limits)
	case n < 30:
		s := w.service()
		w.services[objKey{s.Namespace, s.Name}] = s
		w.inc.SetService(s)
	case n < 40:
		k := objKey{w.pick(worldNamespaces[:3]), w.pick(worldSvcNames)}
		delete(w.services, k)
		w.inc.DeleteService(k.ns, k.name)
	case n < 85:
		s := w.slice()
		w.slices[objKey{s.Namespace, s.Name}] = s
		w.inc.SetEndpointSlice(s)
	default:
		k := objKey{w.pick(worldNamespaces[:3]), fmt.Sprintf("%s-%d", w.pick(worldSvcNames), w.rng.IntN(3))}
		delete(w.slices, k)
		w.inc.DeleteEndpointSlice(k.ns, k.name)
	}
	if w.failed && w.chance(0.3) {
		for k, s := range w.services {
			if s.Validate() != nil {
				delete(w.services, k)
				w.inc.DeleteService(k.ns, k.name)
			}
		}
	}
}

// TestIncrementalServicesShareUnchanged: a slice change gives its
// Service's frontends new entries and leaves every other entry, and the
// map when nothing changed, the same objects; equal content written anew
// keeps the entry.
func TestIncrementalServicesShareUnchanged(t *testing.T) {
	inc := NewIncremental()
	inc.SetService(mkService("prod", "web", []string{"10.96.0.10", "fd00:96::10"}, "http:80", "dns:53/UDP"))
	inc.SetService(mkService("prod", "db", []string{"10.96.0.11"}, ":5432"))
	webV4 := mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{"http:80", "dns:53/UDP"}, ep("10.0.0.2"))
	inc.SetEndpointSlice(webV4)
	inc.SetEndpointSlice(mkSlice("prod", "db-1", "db", policyapi.AddressTypeIPv4, []string{":5432"}, ep("10.0.0.3")))
	compile := func() *Desired {
		t.Helper()
		d, err := inc.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := compile()
	webHTTP, webV6, db := fe("10.96.0.10", 80, policyapi.ProtoTCP), fe("fd00:96::10", 80, policyapi.ProtoTCP), fe("10.96.0.11", 5432, policyapi.ProtoTCP)
	if len(first.Services) != 5 || len(first.Services[webHTTP].Backends) != 1 || first.Services[webV6].Backends != nil {
		t.Fatalf("first result:\n%s", describeServices(first.Services))
	}

	// A second IPv4 endpoint of web: web's IPv4 entries change, the IPv6
	// ones and db's stay.
	inc.SetEndpointSlice(mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{"http:80", "dns:53/UDP"}, ep("10.0.0.2"), ep("10.0.0.4")))
	second := compile()
	if second.Services[webHTTP] == first.Services[webHTTP] || len(second.Services[webHTTP].Backends) != 2 {
		t.Errorf("web's IPv4 entry after a new endpoint: %+v", second.Services[webHTTP])
	}
	if second.Services[webV6] != first.Services[webV6] || second.Services[db] != first.Services[db] {
		t.Error("entries the change did not concern were rebuilt")
	}

	// Nothing changed: the same map.
	if third := compile(); !sameMap(third.Services, second.Services) {
		t.Error("a compilation with no change built a new Services map")
	}

	// The same content written anew (an informer's resync) keeps every
	// entry and the map.
	inc.SetService(mkService("prod", "web", []string{"10.96.0.10", "fd00:96::10"}, "http:80", "dns:53/UDP"))
	inc.SetEndpointSlice(mkSlice("prod", "web-1", "web", policyapi.AddressTypeIPv4, []string{"http:80", "dns:53/UDP"}, ep("10.0.0.4"), ep("10.0.0.2")))
	if fourth := compile(); !sameMap(fourth.Services, second.Services) {
		t.Error("rewriting equal objects built a new Services map")
	}

	// A failed compilation rebuilds from the inputs; equal entries keep
	// the pointers of the last result.
	inc.SetService(mkService("prod", "bad", []string{"10.96.0.12"}, ":80", ":81"))
	if _, err := inc.Compile(); err == nil {
		t.Fatal("a Service with two unnamed ports compiled")
	}
	inc.DeleteService("prod", "bad")
	fifth := compile()
	if fifth.Services[webHTTP] != second.Services[webHTTP] || fifth.Services[db] != second.Services[db] {
		t.Error("a rebuild gave equal entries new pointers")
	}

	// The last Service goes: nil, as Compile gives.
	inc.DeleteService("prod", "web")
	inc.DeleteService("prod", "db")
	if last := compile(); last.Services != nil {
		t.Errorf("no Service left: Services = %v, want nil", last.Services)
	}
}

// TestIncrementalServiceFrontendHandover: when the Service that holds a
// frontend two Services claim goes, the other one takes it over.
func TestIncrementalServiceFrontendHandover(t *testing.T) {
	inc := NewIncremental()
	inc.SetService(mkService("a", "web", []string{"10.96.0.10"}, ":80"))
	inc.SetService(mkService("b", "web", []string{"10.96.0.10"}, ":80"))
	inc.SetEndpointSlice(mkSlice("b", "web-1", "web", policyapi.AddressTypeIPv4, []string{":80"}, ep("10.0.0.2")))
	front := fe("10.96.0.10", 80, policyapi.ProtoTCP)
	d, err := inc.Compile()
	if err != nil || d.Services[front].Service != "a/web" {
		t.Fatalf("two claims: %v, %+v; want a/web's", err, d.Services[front])
	}
	inc.DeleteService("a", "web")
	d, err = inc.Compile()
	if err != nil || d.Services[front].Service != "b/web" || len(d.Services[front].Backends) != 1 ||
		d.Services[front].Backends[0].Addr != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("after a/web went: %v, %+v; want b/web's with its backend", err, d.Services[front])
	}
}
