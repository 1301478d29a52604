package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// serviceEntries returns what each frontend of the Service translates to, given
// the EndpointSlices that name it, for the pods of the node at (see
// endpointLocal). Each ClusterIP and port is a frontend; its backends are
// the endpoints of the ClusterIP's family that the slices list for the
// port's name and protocol: the ready ones (a nil ready condition counts
// as ready), narrowed by their topology hints as kube-proxy narrows them
// (see topologyFilter), or, when none is ready, those serving and
// terminating, as kube-proxy falls back to them. With
// internalTrafficPolicy Local, kube-proxy's rule for the cluster's own
// traffic: only the endpoints on the node, chosen the same way among them
// but for the hints; when the node has none but other nodes have some,
// the entry says NoLocalBackend. An endpoint's first address is its
// address; one that does not parse or is of the other family is left out,
// as is a slice port without a number. A Service labelled for another
// proxy (ParsedService.OtherProxy) has no frontends.
func serviceEntries(cs *policyapi.ParsedService, sl []*policyapi.EndpointSlice, at policyapi.Node) map[ServiceFrontend]*ServiceEntry {
	if len(cs.Addrs) == 0 || len(cs.Ports) == 0 || cs.OtherProxy {
		return nil
	}
	out := make(map[ServiceFrontend]*ServiceEntry, len(cs.Addrs)*len(cs.Ports))
	ix := indexSlices(sl)
	externalEntries(out, cs, ix, at)
	for _, a := range cs.Addrs {
		for _, sp := range cs.Ports {
			fe := ServiceFrontend{Addr: a, Port: sp.Port, Proto: sp.Proto}
			e := &ServiceEntry{Service: cs.Name, AffinityTimeout: cs.Affinity}
			if !cs.InternalLocal {
				e.Backends, _ = backends(ix, a.Is4(), sp, nil, nil, topologyFilter(ix, a.Is4(), sp, at))
			} else {
				var elsewhere bool
				e.Backends, elsewhere = backends(ix, a.Is4(), sp, nil, func(ep policyapi.SliceEndpoint) bool { return endpointLocal(ep, at.Name) }, nil)
				e.NoLocalBackend = len(e.Backends) == 0 && elsewhere
			}
			out[fe] = e
		}
	}
	return out
}

// externalEntries adds to out the external frontends of the Service (see
// ServiceEntry.External), as kube-proxy translates them for a pod of the
// node at: each externalIP and load-balancer IP with each Service port,
// and each of at's addresses with each NodePort, for the families the
// Service has a ClusterIP of; their backends are those of a ClusterIP with
// internalTrafficPolicy Cluster (the external traffic policy decides
// which endpoints serve them, not the internal one). An address that is
// both an externalIP and a load-balancer IP or the node's is the latter.
//
// Some are left to kube-proxy, claimed but never published
// (ServiceEntry.leftToKubeProxy): all of them with externalTrafficPolicy
// Local (what kube-proxy does with pod traffic then depends on its
// local-traffic detector), all of them when they are more than
// MaxExternalFrontends (so that one Service cannot take a large share of
// the node's frontend table), the load-balancer IPs behind a firewall
// (ParsedService.LoadBalancerFirewall). A Service whose addresses times
// ports come to more than MaxExternalClaims, counted before duplicates
// and other families are left out, has none at all: the product of a
// tenant's lists would otherwise be what the compiler builds and keeps.
func externalEntries(out map[ServiceFrontend]*ServiceEntry, cs *policyapi.ParsedService, ix sliceIndex, at policyapi.Node) {
	n := len(cs.Ports) * (len(cs.ExternalIPs) + len(cs.LoadBalancerIPs))
	for _, sp := range cs.Ports {
		if sp.NodePort != 0 {
			n += len(at.Addrs)
		}
	}
	if n > MaxExternalClaims {
		return
	}
	type want struct {
		sp              policyapi.ParsedServicePort
		fromExternalIPs bool
		leftToKubeProxy bool
	}
	ext := make(map[ServiceFrontend]want)
	add := func(a netip.Addr, port uint16, sp policyapi.ParsedServicePort, w want) {
		a = a.Unmap()
		if port == 0 || !slices.ContainsFunc(cs.Addrs, func(c netip.Addr) bool { return c.Is4() == a.Is4() }) {
			return
		}
		fe := ServiceFrontend{Addr: a, Port: port, Proto: sp.Proto}
		if o, ok := ext[fe]; ok && !o.fromExternalIPs {
			return
		}
		w.sp = sp
		ext[fe] = w
	}
	for _, sp := range cs.Ports {
		for _, a := range cs.ExternalIPs {
			add(a, sp.Port, sp, want{fromExternalIPs: true})
		}
		for _, a := range cs.LoadBalancerIPs {
			add(a, sp.Port, sp, want{leftToKubeProxy: cs.LoadBalancerFirewall})
		}
		for _, a := range at.Addrs {
			add(a, sp.NodePort, sp, want{})
		}
	}
	allLeft := cs.ExternalLocal || len(ext) > MaxExternalFrontends
	type famPort struct {
		v4 bool
		sp policyapi.ParsedServicePort
	}
	computed := make(map[famPort][]ServiceBackend)
	for fe, w := range ext {
		e := &ServiceEntry{Service: cs.Name, AffinityTimeout: cs.Affinity, External: true,
			FromExternalIPs: w.fromExternalIPs, leftToKubeProxy: allLeft || w.leftToKubeProxy}
		if !e.leftToKubeProxy {
			k := famPort{fe.Addr.Is4(), w.sp}
			b, ok := computed[k]
			if !ok {
				b, _ = backends(ix, k.v4, w.sp, func(ep policyapi.SliceEndpoint) bool { return endpointLocal(ep, at.Name) }, nil, topologyFilter(ix, k.v4, w.sp, at))
				computed[k] = b
			}
			e.Backends = b
		}
		out[fe] = e
	}
}

// MaxExternalFrontends is the most external frontends (externalIPs and
// load-balancer IPs times ports, NodePorts times the node's addresses)
// lockstep translates for one Service; kube-proxy keeps those of a Service
// with more.
const MaxExternalFrontends = 256

// MaxExternalClaims is the most external frontends of one Service the
// compiler builds (see externalEntries); those of a Service with more are
// kube-proxy's and claim nothing.
const MaxExternalClaims = 4 * MaxExternalFrontends

// endpointLocal reports whether ep runs on node: its nodeName is node, as
// kube-proxy decides. Without a node (the standalone agent, which has no
// Node object and is the only node it knows) every endpoint is local.
func endpointLocal(ep policyapi.SliceEndpoint, node string) bool {
	return node == "" || (ep.NodeName != nil && *ep.NodeName == node)
}

// backends returns the backends the slices give the Service port sp in
// one family, sorted by address then port, each once; nil when there are
// none. With local, those it reports are Local (of an address and port two
// endpoints share, one not local, the one kept is not). With keep, only
// endpoints it keeps count, and others reports whether an endpoint it
// left out would have served (ready, or serving and terminating). With
// keepReady, only ready endpoints it keeps count (the
// serving and terminating ones are kube-proxy's fallback, which it does
// not narrow by topology).
func backends(ix sliceIndex, v4 bool, sp policyapi.ParsedServicePort, local, keep, keepReady func(policyapi.SliceEndpoint) bool) (_ []ServiceBackend, others bool) {
	var ready, fallback []ServiceBackend
	eachEndpoint(ix, v4, sp, func(ep policyapi.SliceEndpoint, b ServiceBackend) {
		b.Local = local != nil && local(ep)
		c := ep.Conditions
		var to *[]ServiceBackend
		switch {
		case endpointReady(ep):
			if keepReady != nil && !keepReady(ep) {
				return
			}
			to = &ready
		case (c.Serving == nil || *c.Serving) && c.Terminating != nil && *c.Terminating:
			to = &fallback
		default:
			return
		}
		if keep != nil && !keep(ep) {
			others = true
			return
		}
		*to = append(*to, b)
	})
	if len(ready) == 0 {
		ready = fallback
	}
	if len(ready) == 0 {
		return nil, others
	}
	slices.SortFunc(ready, CompareBackend)
	return slices.Clip(slices.CompactFunc(ready, func(a, b ServiceBackend) bool { return a.Addr == b.Addr && a.Port == b.Port })), others
}

// sliceIndex is a Service's EndpointSlices by the ports they carry: each
// slice port is read once per Service, not once per Service port, so a
// Service of n ports and slices of as many costs n, not n squared.
type sliceIndex struct {
	ports map[slicePortKey][]slicePort
	// hints: some endpoint has topology hints (see topologyFilter).
	hints bool
}

// slicePortKey is what a slice port must share with a Service port to
// carry its endpoints (see slicePortKeyOf), and the slice's family.
type slicePortKey struct {
	name  string
	proto uint8
	v4    bool
}

// slicePort is one port of a slice, with a valid number.
type slicePort struct {
	s    *policyapi.EndpointSlice
	port uint16
}

// indexSlices indexes sl's IPv4 and IPv6 slices by port, in the order of
// the slices and their ports.
func indexSlices(sl []*policyapi.EndpointSlice) sliceIndex {
	ix := sliceIndex{ports: map[slicePortKey][]slicePort{}}
	for _, s := range sl {
		if s.AddressType != policyapi.AddressTypeIPv4 && s.AddressType != policyapi.AddressTypeIPv6 {
			continue
		}
		ix.hints = ix.hints || slices.ContainsFunc(s.Endpoints, func(ep policyapi.SliceEndpoint) bool { return ep.Hints != nil })
		for _, p := range s.Ports {
			name, proto, ok := slicePortKeyOf(p)
			if !ok {
				continue
			}
			k := slicePortKey{name: name, proto: proto, v4: s.AddressType == policyapi.AddressTypeIPv4}
			ix.ports[k] = append(ix.ports[k], slicePort{s: s, port: uint16(*p.Port)})
		}
	}
	return ix
}

// eachEndpoint calls fn with each endpoint the slices list for the Service
// port sp in one family, and the backend it would be: its first address,
// which must parse and be of the family, and the slice port's number.
func eachEndpoint(ix sliceIndex, v4 bool, sp policyapi.ParsedServicePort, fn func(policyapi.SliceEndpoint, ServiceBackend)) {
	for _, p := range ix.ports[slicePortKey{name: sp.Name, proto: sp.Proto, v4: v4}] {
		for _, ep := range p.s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil || a.Zone() != "" || a.Unmap().Is4() != v4 {
				continue
			}
			fn(ep, ServiceBackend{Addr: a.Unmap(), Port: p.port})
		}
	}
}

// endpointReady reports whether ep is ready (a nil condition counts as
// ready).
func endpointReady(ep policyapi.SliceEndpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// topologyFilter returns which ready endpoints of the Service port sp in
// one family serve the pods of the node at, by the endpoints' hints, as
// kube-proxy decides for a Service's cluster-wide traffic: when every
// ready endpoint has node hints and one names at's node, those naming it;
// else when every ready endpoint has zone hints and one names at's zone,
// those naming it; else nil (every ready endpoint). A node without a zone
// matches no zone hint.
func topologyFilter(ix sliceIndex, v4 bool, sp policyapi.ParsedServicePort, at policyapi.Node) func(policyapi.SliceEndpoint) bool {
	if !ix.hints {
		return nil // the common case: no hints, nothing to read twice
	}
	allNodes, allZones, forNode, forZone := true, true, false, false
	eachEndpoint(ix, v4, sp, func(ep policyapi.SliceEndpoint, _ ServiceBackend) {
		if !endpointReady(ep) {
			return
		}
		if ep.Hints == nil || len(ep.Hints.ForNodes) == 0 {
			allNodes = false
		} else if hintsNode(ep.Hints, at.Name) {
			forNode = true
		}
		if ep.Hints == nil || len(ep.Hints.ForZones) == 0 {
			allZones = false
		} else if hintsZone(ep.Hints, at.Zone) {
			forZone = true
		}
	})
	switch {
	case allNodes && forNode && at.Name != "":
		return func(ep policyapi.SliceEndpoint) bool { return hintsNode(ep.Hints, at.Name) }
	case allZones && forZone && at.Zone != "":
		return func(ep policyapi.SliceEndpoint) bool { return hintsZone(ep.Hints, at.Zone) }
	}
	return nil
}

func hintsNode(h *policyapi.EndpointHints, node string) bool {
	return h != nil && slices.ContainsFunc(h.ForNodes, func(n policyapi.ForNode) bool { return n.Name == node })
}

func hintsZone(h *policyapi.EndpointHints, zone string) bool {
	return h != nil && slices.ContainsFunc(h.ForZones, func(z policyapi.ForZone) bool { return z.Name == zone })
}

// slicePortKeyOf returns the name and protocol by which the slice port p
// carries the endpoints of a Service port of the same name and protocol,
// and false when it carries none: it has no valid number, or a protocol
// lockstep does not know.
func slicePortKeyOf(p policyapi.EndpointSlicePort) (name string, proto uint8, ok bool) {
	if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
		return "", 0, false
	}
	if p.Name != nil {
		name = *p.Name
	}
	proto = policyapi.ProtoTCP
	if p.Protocol != nil {
		n, err := p.Protocol.Number()
		if err != nil {
			return "", 0, false
		}
		proto = n
	}
	return name, proto, true
}

// compareClaim orders two Services' entries for one frontend, a of the
// Service ak and b of bk: a ClusterIP first, then a load-balancer IP or
// NodePort, then an externalIP (see ServiceEntry.FromExternalIPs), then by
// namespace/name.
func compareClaim(ak objKey, a *ServiceEntry, bk objKey, b *ServiceEntry) int {
	return cmp.Or(cmp.Compare(claimRank(a), claimRank(b)), compareObjKey(ak, bk))
}

func claimRank(e *ServiceEntry) int {
	switch {
	case !e.External:
		return 0
	case !e.FromExternalIPs:
		return 1
	}
	return 2
}

// CompareBackend orders backends as ServiceEntry.Backends lists them: by
// address, then port; of two that differ only in Local, the one not Local
// first.
func CompareBackend(a, b ServiceBackend) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	switch {
	case a.Local == b.Local:
		return 0
	case b.Local:
		return -1
	}
	return 1
}

// sameEntry reports whether two entries translate alike.
func sameEntry(a, b *ServiceEntry) bool {
	return a.Service == b.Service && a.AffinityTimeout == b.AffinityTimeout && a.NoLocalBackend == b.NoLocalBackend &&
		a.External == b.External && a.FromExternalIPs == b.FromExternalIPs && a.leftToKubeProxy == b.leftToKubeProxy &&
		slices.Equal(a.Backends, b.Backends)
}

// compileServices computes Desired.Services of a snapshot: each Service's
// frontends from its slices (those of its namespace whose
// ServiceNameLabel names it). Two Services claiming one frontend (the
// same address, port and protocol: an API server never allocates one
// ClusterIP twice, but anyone may name it as an externalIP) give it to the
// one whose claim compareClaim orders first. Nil when there is no frontend.
// at is the Node whose pods' connections are translated (Snapshot.Node and
// Snapshot.Zone). The namespaces whose Services l leaves untranslated
// (Limits.servicesOver) still claim their frontends but have none
// published; over says why, by namespace.
func compileServices(svcs []*policyapi.Service, sl []*policyapi.EndpointSlice, at policyapi.Node, l Limits) (_ map[ServiceFrontend]*ServiceEntry, over map[string]string, _ error) {
	bySvc := make(map[objKey][]*policyapi.EndpointSlice)
	seen := make(map[objKey]bool, len(sl))
	for _, s := range sl {
		k := objKey{policyapi.NamespaceOrDefault(s.Namespace), s.Name}
		if seen[k] {
			return nil, nil, fmt.Errorf("endpointslice %s/%s listed twice", k.ns, k.name)
		}
		seen[k] = true
		if name := s.ServiceName(); name != "" {
			sk := objKey{k.ns, name}
			bySvc[sk] = append(bySvc[sk], s)
		}
	}
	entries := make(map[objKey]map[ServiceFrontend]*ServiceEntry, len(svcs))
	costs := map[string]serviceCost{}
	for _, s := range svcs {
		k := objKey{policyapi.NamespaceOrDefault(s.Namespace), s.Name}
		if _, dup := entries[k]; dup {
			return nil, nil, fmt.Errorf("service %s/%s listed twice", k.ns, k.name)
		}
		cs, err := policyapi.ParseService(s)
		if err != nil {
			return nil, nil, err
		}
		entries[k] = serviceEntries(cs, bySvc[k], at)
		if c := serviceCostOf(entries[k]); c != (serviceCost{}) {
			costs[k.ns] = costs[k.ns].add(c)
		}
	}
	over = l.servicesOver(costs)
	var out map[ServiceFrontend]*ServiceEntry
	owner := map[ServiceFrontend]objKey{}
	for _, s := range svcs {
		k := objKey{policyapi.NamespaceOrDefault(s.Namespace), s.Name}
		for fe, e := range entries[k] {
			if o, taken := owner[fe]; taken && compareClaim(o, out[fe], k, e) < 0 {
				continue
			}
			if out == nil {
				out = map[ServiceFrontend]*ServiceEntry{}
			}
			owner[fe] = k
			out[fe] = e
		}
	}
	for fe, e := range out {
		if e.leftToKubeProxy || over[owner[fe].ns] != "" {
			delete(out, fe)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, over, nil
}
