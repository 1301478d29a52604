package api

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"
)

// DefaultAffinityTimeout is Kubernetes' default
// sessionAffinityConfig.clientIP.timeoutSeconds.
const DefaultAffinityTimeout = 10800 * time.Second

// Default fills in what the API server defaults in a Service: the type
// (ClusterIP), ClusterIPs from ClusterIP, port protocols (TCP), target
// ports (the port itself), the session affinity (None), ClientIP's
// timeout (DefaultAffinityTimeout) and, but for ExternalName, the
// internal traffic policy (Cluster). The compiler applies the same
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
	if spec.InternalTrafficPolicy == nil && spec.Type != ServiceTypeExternalName {
		p := ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &p
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
	_, err := ParseService(s)
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
	name := NamespaceOrDefault(s.Namespace) + "/" + s.Name
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
			if _, err := p.Protocol.Number(); err != nil {
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

// maxAffinityTimeout is the longest sessionAffinityConfig.clientIP
// timeout the API accepts (a day).
const maxAffinityTimeout = 86400

// ParsedService is a validated Service with defaults applied.
type ParsedService struct {
	Name string // namespace/name
	// Addrs are the ClusterIPs to translate, unmapped; none for a
	// headless or ExternalName Service.
	Addrs    []netip.Addr
	Ports    []ParsedServicePort
	Affinity time.Duration
	// InternalLocal: internalTrafficPolicy Local, pods' connections go
	// only to endpoints on their own node.
	InternalLocal bool
	// ExternalIPs are the spec.externalIPs to translate like the
	// ClusterIPs, unmapped, each once; one that does not parse is left
	// out, as kube-proxy leaves it out.
	ExternalIPs []netip.Addr
	// LoadBalancerIPs are the status's load-balancer IPs of ipMode VIP of
	// a LoadBalancer Service, likewise.
	LoadBalancerIPs []netip.Addr
	// LoadBalancerFirewall: the Service has loadBalancerSourceRanges, a
	// firewall for LoadBalancerIPs that is kube-proxy's own, so lockstep
	// leaves them to kube-proxy.
	LoadBalancerFirewall bool
	// ExternalLocal: externalTrafficPolicy Local. kube-proxy sends pods'
	// connections to ExternalIPs, LoadBalancerIPs and the NodePorts to any
	// endpoint then, or only to local ones, depending on its local-traffic
	// detector, which the node's agent does not know: lockstep leaves them
	// to kube-proxy.
	ExternalLocal bool
	// OtherProxy: the Service carries ServiceProxyNameLabel (whatever its
	// value), so it belongs to that proxy and lockstep translates none of
	// it, as kube-proxy leaves it alone.
	OtherProxy bool
}

// ParsedServicePort is one port of a Service, protocol numbered.
type ParsedServicePort struct {
	Name  string
	Proto uint8
	Port  uint16
	// NodePort is the port on the node's addresses, 0 for none.
	NodePort uint16
}

// ParseService validates s and returns its parsed form.
func ParseService(s *Service) (*ParsedService, error) {
	ns := NamespaceOrDefault(s.Namespace)
	cs := &ParsedService{Name: ns + "/" + s.Name}
	fail := func(field string, err error) (*ParsedService, error) {
		return nil, fmt.Errorf("service %s: %s: %w", cs.Name, field, err)
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
		if len(cs.Addrs) > 0 && cs.Addrs[0].Is4() == a.Is4() {
			return fail(field, fmt.Errorf("%s: two ClusterIPs of one family", a))
		}
		cs.Addrs = append(cs.Addrs, a)
	}
	if spec.Type == ServiceTypeExternalName {
		cs.Addrs = nil // a DNS name, nothing to translate
	}
	names := map[string]bool{}
	type protoPort struct {
		proto uint8
		port  uint16
	}
	seen := make(map[protoPort]bool, len(spec.Ports))
	for i, p := range spec.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		proto, err := p.Protocol.Number()
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
		sp := ParsedServicePort{Name: p.Name, Proto: proto, Port: uint16(p.Port)}
		if p.NodePort != 0 && (spec.Type == ServiceTypeNodePort || spec.Type == ServiceTypeLoadBalancer) {
			if err := checkPortNum("nodePort", p.NodePort); err != nil {
				return fail(field, err)
			}
			sp.NodePort = uint16(p.NodePort)
		}
		if seen[protoPort{sp.Proto, sp.Port}] {
			return fail(field, fmt.Errorf("duplicate port %d/%s", p.Port, cmp.Or(p.Protocol, TCP)))
		}
		seen[protoPort{sp.Proto, sp.Port}] = true
		cs.Ports = append(cs.Ports, sp)
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
		cs.Affinity = DefaultAffinityTimeout
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t < 1 || t > maxAffinityTimeout {
				return fail("spec.sessionAffinityConfig.clientIP.timeoutSeconds", fmt.Errorf("%d out of range 1-%d", t, maxAffinityTimeout))
			}
			cs.Affinity = time.Duration(t) * time.Second
		}
	default:
		return fail("spec.sessionAffinity", fmt.Errorf("unknown session affinity %q (want None or ClientIP)", spec.SessionAffinity))
	}
	if p := spec.InternalTrafficPolicy; p != nil {
		switch *p {
		case ServiceInternalTrafficPolicyCluster:
		case ServiceInternalTrafficPolicyLocal:
			cs.InternalLocal = true
		default:
			return fail("spec.internalTrafficPolicy", fmt.Errorf("unknown policy %q (want Cluster or Local)", *p))
		}
	}
	switch spec.ExternalTrafficPolicy {
	case "", ServiceExternalTrafficPolicyCluster:
	case ServiceExternalTrafficPolicyLocal:
		cs.ExternalLocal = true
	default:
		return fail("spec.externalTrafficPolicy", fmt.Errorf("unknown policy %q (want Cluster or Local)", spec.ExternalTrafficPolicy))
	}
	if spec.Type != ServiceTypeExternalName {
		cs.parseExternal(s)
	}
	_, cs.OtherProxy = s.Labels[ServiceProxyNameLabel]
	return cs, nil
}

// parseExternal fills in cs.ExternalIPs and cs.LoadBalancerIPs from s
// (see ParseAddrs: failing the Service would take its ClusterIPs'
// translation too).
func (cs *ParsedService) parseExternal(s *Service) {
	cs.ExternalIPs = ParseAddrs(s.Spec.ExternalIPs)
	if s.Spec.Type != ServiceTypeLoadBalancer {
		return
	}
	cs.LoadBalancerFirewall = len(s.Spec.LoadBalancerSourceRanges) > 0
	var vips []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IPMode == nil || *in.IPMode == LoadBalancerIPModeVIP {
			vips = append(vips, in.IP)
		}
	}
	cs.LoadBalancerIPs = ParseAddrs(vips)
}

// ParseAddrs returns the addresses of ss, unmapped, each once, in order,
// leaving out those that do not parse or carry a zone, as kube-proxy
// leaves out an externalIP or a Node's address it cannot read. Nil when
// none is left.
func ParseAddrs(ss []string) []netip.Addr {
	var out []netip.Addr
	seen := make(map[netip.Addr]bool, len(ss))
	for _, s := range ss {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			continue
		}
		if a = a.Unmap(); !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}
