package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// maxAffinityTimeout is the longest sessionAffinityConfig.clientIP
// timeout the API accepts (a day).
const maxAffinityTimeout = 86400

// Default fills in what the API server defaults in a Service: the type
// (ClusterIP), ClusterIPs from ClusterIP, port protocols (TCP), target
// ports (the port itself), the session affinity (None) and ClientIP's
// timeout (DefaultAffinityTimeout). The compiler applies the same
// defaults without calling Default.
func (s *Service) Default() {
	spec := &s.Spec
	if spec.Type == "" {
		spec.Type = ServiceTypeClusterIP
	}
	if len(spec.ClusterIPs) == 0 && spec.ClusterIP != "" {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = TCP
		}
		if p.TargetPort == nil || (!p.TargetPort.IsString && p.TargetPort.IntVal == 0) {
			p.TargetPort = FromInt(p.Port)
		}
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = ServiceAffinityNone
	}
	if spec.SessionAffinity == ServiceAffinityClientIP {
		if spec.SessionAffinityConfig == nil {
			spec.SessionAffinityConfig = &SessionAffinityConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP == nil {
			spec.SessionAffinityConfig.ClientIP = &ClientIPConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := int32(DefaultAffinityTimeout / time.Second)
			spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &t
		}
	}
}

// Validate reports the first reason the API server would reject s, in the
// fields a dataplane reads, naming the Service and the field.
func (s *Service) Validate() error {
	_, err := compileService(s)
	return err
}

// NeedsClusterIP reports whether s is of a type that pods reach by
// ClusterIP (every type but ExternalName) and names none, neither an
// address nor "None": the API server would allocate one.
func (s *Service) NeedsClusterIP() bool {
	return s.Spec.Type != ServiceTypeExternalName && s.Spec.ClusterIP == "" && len(s.Spec.ClusterIPs) == 0
}

// Validate checks the parts of an EndpointSlice the compiler reads that
// the API server would refuse: the name, the address type and the ports.
// Endpoints whose addresses do not parse are not an error: the compiler
// leaves them out, as kube-proxy does.
func (s *EndpointSlice) Validate() error {
	name := objNamespace(s.Namespace) + "/" + s.Name
	if s.Name == "" {
		return fmt.Errorf("endpointslice in namespace %q: metadata.name is required", s.Namespace)
	}
	switch s.AddressType {
	case AddressTypeIPv4, AddressTypeIPv6, AddressTypeFQDN:
	default:
		return fmt.Errorf("endpointslice %s: addressType: unknown address type %q (want IPv4, IPv6 or FQDN)", name, s.AddressType)
	}
	for i, p := range s.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.Protocol != nil {
			if _, err := protoNumber(*p.Protocol); err != nil {
				return fmt.Errorf("endpointslice %s: %s: %w", name, field, err)
			}
		}
		if p.Port != nil {
			if err := checkPortNum("port", *p.Port); err != nil {
				return fmt.Errorf("endpointslice %s: %s: %w", name, field, err)
			}
		}
	}
	return nil
}

// objNamespace is the namespace of a namespaced object: "default" when
// it names none.
func objNamespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// compiledService is a validated Service with defaults applied.
type compiledService struct {
	name string // namespace/name
	// addrs are the ClusterIPs to translate, unmapped; none for a
	// headless or ExternalName Service.
	addrs    []netip.Addr
	ports    []servicePort
	affinity time.Duration
}

// servicePort is one port of a Service, protocol numbered.
type servicePort struct {
	name  string
	proto uint8
	port  uint16
}

// compileService validates s and returns its compiled form.
func compileService(s *Service) (*compiledService, error) {
	ns := objNamespace(s.Namespace)
	cs := &compiledService{name: ns + "/" + s.Name}
	fail := func(field string, err error) (*compiledService, error) {
		return nil, fmt.Errorf("service %s: %s: %w", cs.name, field, err)
	}
	if s.Name == "" {
		return nil, fmt.Errorf("service in namespace %q: metadata.name is required", ns)
	}
	spec := &s.Spec
	switch spec.Type {
	case "", ServiceTypeClusterIP, ServiceTypeNodePort, ServiceTypeLoadBalancer, ServiceTypeExternalName:
	default:
		return fail("spec.type", fmt.Errorf("unknown type %q (want ClusterIP, NodePort, LoadBalancer or ExternalName)", spec.Type))
	}
	ips := spec.ClusterIPs
	if len(ips) == 0 && spec.ClusterIP != "" {
		ips = []string{spec.ClusterIP}
	}
	if spec.ClusterIP != "" && len(ips) > 0 && ips[0] != spec.ClusterIP {
		return fail("spec.clusterIPs[0]", fmt.Errorf("%q differs from spec.clusterIP %q", ips[0], spec.ClusterIP))
	}
	if len(ips) > 2 {
		return fail("spec.clusterIPs", fmt.Errorf("%d addresses, at most one per family", len(ips)))
	}
	for i, ip := range ips {
		field := fmt.Sprintf("spec.clusterIPs[%d]", i)
		if ip == ClusterIPNone {
			if len(ips) > 1 {
				return fail(field, fmt.Errorf("%q must be the only ClusterIP", ClusterIPNone))
			}
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			return fail(field, fmt.Errorf("%q is not an IP address or %q", ip, ClusterIPNone))
		}
		a = a.Unmap()
		if len(cs.addrs) > 0 && cs.addrs[0].Is4() == a.Is4() {
			return fail(field, fmt.Errorf("%s: two ClusterIPs of one family", a))
		}
		cs.addrs = append(cs.addrs, a)
	}
	if spec.Type == ServiceTypeExternalName {
		cs.addrs = nil // a DNS name, nothing to translate
	}
	names := map[string]bool{}
	for i, p := range spec.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		proto, err := protoNumber(p.Protocol)
		if err != nil {
			return fail(field, err)
		}
		if err := checkPortNum("port", p.Port); err != nil {
			return fail(field, err)
		}
		if len(spec.Ports) > 1 && p.Name == "" {
			return fail(field+".name", fmt.Errorf("required when a Service has more than one port"))
		}
		if p.Name != "" && !isDNSLabel(p.Name) {
			return fail(field+".name", fmt.Errorf("invalid port name %q: want a DNS label (1-63 of a-z, 0-9 and '-', no leading or trailing '-')", p.Name))
		}
		if names[p.Name] {
			return fail(field+".name", fmt.Errorf("duplicate port name %q", p.Name))
		}
		names[p.Name] = true
		sp := servicePort{name: p.Name, proto: proto, port: uint16(p.Port)}
		if slices.ContainsFunc(cs.ports, func(o servicePort) bool { return o.proto == sp.proto && o.port == sp.port }) {
			return fail(field, fmt.Errorf("duplicate port %d/%s", p.Port, cmp.Or(p.Protocol, TCP)))
		}
		cs.ports = append(cs.ports, sp)
		if tp := p.TargetPort; tp != nil {
			switch {
			case tp.IsString && !isPortName(tp.StrVal):
				return fail(field+".targetPort", fmt.Errorf("invalid port name %q", tp.StrVal))
			case !tp.IsString && tp.IntVal != 0:
				if err := checkPortNum("targetPort", tp.IntVal); err != nil {
					return fail(field, err)
				}
			}
		}
	}
	for k, v := range spec.Selector {
		if err := validateLabelKey(k); err != nil {
			return fail("spec.selector", err)
		}
		if err := validateLabelValue(v); err != nil {
			return fail("spec.selector", err)
		}
	}
	switch spec.SessionAffinity {
	case "", ServiceAffinityNone:
	case ServiceAffinityClientIP:
		cs.affinity = DefaultAffinityTimeout
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t < 1 || t > maxAffinityTimeout {
				return fail("spec.sessionAffinityConfig.clientIP.timeoutSeconds", fmt.Errorf("%d out of range 1-%d", t, maxAffinityTimeout))
			}
			cs.affinity = time.Duration(t) * time.Second
		}
	default:
		return fail("spec.sessionAffinity", fmt.Errorf("unknown session affinity %q (want None or ClientIP)", spec.SessionAffinity))
	}
	return cs, nil
}

// entries returns what each frontend of the Service translates to, given
// the EndpointSlices that name it. Each ClusterIP and port is a frontend;
// its backends are the endpoints of the ClusterIP's family that the
// slices list for the port's name and protocol: the ready ones (a nil
// ready condition counts as ready) or, when none is ready, those serving
// and terminating, as kube-proxy falls back to them. An endpoint's first
// address is its address; one that does not parse or is of the other
// family is left out, as is a slice port without a number.
func (cs *compiledService) entries(sl []*EndpointSlice) map[ServiceFrontend]*ServiceEntry {
	if len(cs.addrs) == 0 || len(cs.ports) == 0 {
		return nil
	}
	out := make(map[ServiceFrontend]*ServiceEntry, len(cs.addrs)*len(cs.ports))
	for _, a := range cs.addrs {
		for _, sp := range cs.ports {
			fe := ServiceFrontend{Addr: a, Port: sp.port, Proto: sp.proto}
			out[fe] = &ServiceEntry{Service: cs.name, Backends: backends(sl, a.Is4(), sp), AffinityTimeout: cs.affinity}
		}
	}
	return out
}

// backends returns the backends the slices give the Service port sp in
// one family, sorted by address then port, each once; nil when there are
// none.
func backends(sl []*EndpointSlice, v4 bool, sp servicePort) []ServiceBackend {
	want := AddressTypeIPv6
	if v4 {
		want = AddressTypeIPv4
	}
	var ready, fallback []ServiceBackend
	for _, s := range sl {
		if s.AddressType != want {
			continue
		}
		for _, p := range s.Ports {
			if !slicePortMatches(p, sp) {
				continue
			}
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				a, err := netip.ParseAddr(ep.Addresses[0])
				if err != nil || a.Zone() != "" || a.Unmap().Is4() != v4 {
					continue
				}
				b := ServiceBackend{Addr: a.Unmap(), Port: uint16(*p.Port)}
				c := ep.Conditions
				switch {
				case c.Ready == nil || *c.Ready:
					ready = append(ready, b)
				case (c.Serving == nil || *c.Serving) && c.Terminating != nil && *c.Terminating:
					fallback = append(fallback, b)
				}
			}
		}
	}
	if len(ready) == 0 {
		ready = fallback
	}
	if len(ready) == 0 {
		return nil
	}
	slices.SortFunc(ready, compareBackend)
	return slices.Clip(slices.Compact(ready))
}

// slicePortMatches reports whether the slice port p carries the endpoints
// of the Service port sp: the same name and protocol, and a port number.
func slicePortMatches(p EndpointSlicePort, sp servicePort) bool {
	if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
		return false
	}
	name := ""
	if p.Name != nil {
		name = *p.Name
	}
	proto := ProtoTCP
	if p.Protocol != nil {
		n, err := protoNumber(*p.Protocol)
		if err != nil {
			return false
		}
		proto = n
	}
	return name == sp.name && proto == sp.proto
}

func compareBackend(a, b ServiceBackend) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// sameEntry reports whether two entries translate alike.
func sameEntry(a, b *ServiceEntry) bool {
	return a.Service == b.Service && a.AffinityTimeout == b.AffinityTimeout && slices.Equal(a.Backends, b.Backends)
}

// compileServices computes Desired.Services of a snapshot: each Service's
// frontends from its slices (those of its namespace whose
// ServiceNameLabel names it). Two Services claiming one frontend (the
// same ClusterIP, port and protocol, which an API server never allocates)
// give it to the first by namespace/name. Nil when there is no frontend.
func compileServices(svcs []*Service, sl []*EndpointSlice) (map[ServiceFrontend]*ServiceEntry, error) {
	bySvc := make(map[objKey][]*EndpointSlice)
	seen := make(map[objKey]bool, len(sl))
	for _, s := range sl {
		k := objKey{objNamespace(s.Namespace), s.Name}
		if seen[k] {
			return nil, fmt.Errorf("endpointslice %s/%s listed twice", k.ns, k.name)
		}
		seen[k] = true
		if name := s.ServiceName(); name != "" {
			sk := objKey{k.ns, name}
			bySvc[sk] = append(bySvc[sk], s)
		}
	}
	var out map[ServiceFrontend]*ServiceEntry
	owner := map[ServiceFrontend]objKey{}
	keys := make(map[objKey]bool, len(svcs))
	for _, s := range svcs {
		k := objKey{objNamespace(s.Namespace), s.Name}
		if keys[k] {
			return nil, fmt.Errorf("service %s/%s listed twice", k.ns, k.name)
		}
		keys[k] = true
		cs, err := compileService(s)
		if err != nil {
			return nil, err
		}
		for fe, e := range cs.entries(bySvc[k]) {
			if o, taken := owner[fe]; taken && compareObjKey(o, k) < 0 {
				continue
			}
			if out == nil {
				out = map[ServiceFrontend]*ServiceEntry{}
			}
			owner[fe] = k
			out[fe] = e
		}
	}
	return out, nil
}
