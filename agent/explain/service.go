package explain

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// viaService answers q, whose destination is a Service's frontend: the
// ClusterIP q.To is, or the one of svc/NAMESPACE/NAME of q.Family (else
// of the source's address when it is one, else the Service's first). It
// translates the frontend with the compiler's own table, so the backends
// are those the dataplanes pick from, then judges the connection to each.
func (ix *index) viaService(q Query, proto policyapi.Protocol, from *party) (*Result, error) {
	svc, addr, err := ix.frontendAddr(q, from)
	if err != nil {
		return nil, fmt.Errorf("explain --to %s: %w", q.To, err)
	}
	name := policyapi.NamespaceOrDefault(svc.Namespace) + "/" + svc.Name
	if proxy, ok := svc.Labels[policyapi.ServiceProxyNameLabel]; ok {
		return nil, fmt.Errorf("explain --to %s: %w: service %s is labelled %s=%q: that proxy translates it, not lockstep nor kube-proxy, so the dataplanes judge a pod's egress on the ClusterIP itself; name the backend pod to judge its ingress",
			q.To, ErrServiceAddress, name, policyapi.ServiceProxyNameLabel, proxy)
	}
	num, err := proto.Number()
	if err != nil {
		return nil, fmt.Errorf("explain --to %s: %w: %w", q.To, ErrBadQuery, err)
	}
	// internalTrafficPolicy Local and topology hints are decided on the
	// client's node, as kube-proxy decides them there (see clientNode).
	table, over, err := policy.ServiceTable(ix.s.Services, ix.s.EndpointSlices, ix.clientNode(from), ix.s.Limits)
	if err != nil {
		return nil, fmt.Errorf("explain --to %s: translate the Services: %w", q.To, err)
	}
	entry := table[policy.ServiceFrontend{Addr: addr, Port: q.Port, Proto: num}]
	if entry != nil && entry.External {
		return nil, externalFrontendError(q, entry, proto)
	}
	if why := over[policyapi.NamespaceOrDefault(svc.Namespace)]; entry == nil && why != "" {
		where := "this node"
		if n := ix.clientNode(from).Name; n != "" {
			where = "node " + n
		}
		return nil, fmt.Errorf("explain --to %s: %w: lockstep does not translate service %s for the pods of %s (%s); name the backend pod to judge its ingress",
			q.To, ErrServiceAddress, name, where, why)
	}
	if entry == nil {
		return nil, fmt.Errorf("explain --to %s: %w: service %s has no port %d/%s (its ports: %s); --port is a Service port",
			q.To, ErrServiceAddress, name, q.Port, proto, servicePorts(svc))
	}
	name = entry.Service // the frontend's owner, should two claim it
	family := familyOf(addr)
	from.pick(family)
	res := &Result{
		From: from.party(), To: Party{Service: name, Address: addr.String()},
		Port: q.Port, Protocol: string(proto),
	}
	for _, b := range entry.Backends {
		to, err := ix.resolve(Endpoint{Prefix: netip.PrefixFrom(b.Addr, b.Addr.BitLen())})
		if err != nil {
			return nil, fmt.Errorf("explain --to %s: backend %s: %w", q.To, b.Addr, err)
		}
		f := *from
		res.Backends = append(res.Backends, *ix.judgeConn(&f, to, family, b.Port, proto))
	}
	res.Verdict, res.Reason = summarise(res.Backends)
	if entry.NoLocalBackend {
		res.Verdict = Deny
		res.Reason = fmt.Sprintf("no local backend: %s has internalTrafficPolicy Local and no ready endpoint on node %s for %d/%s over IPv%d (other nodes have some), so the connection is dropped, as kube-proxy drops it",
			name, ix.clientNode(from).Name, q.Port, proto, family)
		return res, nil
	}
	if len(res.Backends) == 0 {
		res.Reason = fmt.Sprintf("no ready backend: %s has no ready endpoint for %d/%s over IPv%d, so the connection is refused before any policy judges it%s",
			name, q.Port, proto, family, ix.addressless(svc, family))
	}
	return res, nil
}

// frontendAddr finds the Service q.To names and the ClusterIP to
// translate.
func (ix *index) frontendAddr(q Query, from *party) (*policyapi.Service, netip.Addr, error) {
	if !q.To.Service {
		a := q.To.Prefix.Addr()
		return ix.serviceAt(a), a, nil
	}
	var svc *policyapi.Service
	var names []string
	for _, s := range ix.s.Services {
		if policyapi.NamespaceOrDefault(s.Namespace) != q.To.Namespace {
			continue
		}
		names = append(names, s.Name)
		if s.Name == q.To.Name {
			svc = s
		}
	}
	if svc == nil {
		slices.Sort(names)
		list := strings.Join(names, ", ")
		if list == "" {
			list = "none"
		}
		return nil, netip.Addr{}, fmt.Errorf("%w %s/%s (the Services of namespace %s are %s)", ErrUnknownService, q.To.Namespace, q.To.Name, q.To.Namespace, list)
	}
	cs, err := policyapi.ParseService(svc)
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("%w: %w", ErrServiceAddress, err)
	}
	if len(cs.Addrs) == 0 {
		return nil, netip.Addr{}, fmt.Errorf("%w: service %s has no ClusterIP (headless or ExternalName): its clients reach the pods' own addresses, so name a pod", ErrServiceAddress, cs.Name)
	}
	want := q.Family
	if want == 0 && !from.isPod() {
		want = familyOf(from.prefix.Addr())
	}
	for _, a := range cs.Addrs {
		if want == 0 || familyOf(a) == want {
			return svc, a, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("%w: service %s has no IPv%d ClusterIP", ErrServiceAddress, cs.Name, want)
}

// summarise gives a Service's verdict and reason from its backends'.
func summarise(backends []Result) (string, string) {
	var allow, deny []Result
	for _, b := range backends {
		if b.Verdict == Allow {
			allow = append(allow, b)
		} else {
			deny = append(deny, b)
		}
	}
	switch {
	case len(backends) == 0:
		return Refused, "no ready backend"
	case len(backends) == 1:
		return backends[0].Verdict, "via backend " + backendName(backends[0]) + ": " + backends[0].Reason
	case len(deny) == 0:
		return Allow, fmt.Sprintf("every backend allows: %s", backendList(allow))
	case len(allow) == 0:
		return Deny, fmt.Sprintf("no backend allows: %s", backendReasons(deny))
	}
	return Partial, fmt.Sprintf("%d of %d backends allow (%s); %s", len(allow), len(backends), backendList(allow), backendReasons(deny))
}

// backendName is POD:PORT, or ADDRESS:PORT for a backend outside the
// cluster.
func backendName(b Result) string {
	return b.To.String() + ":" + strconv.Itoa(int(b.Port))
}

func backendList(bs []Result) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = backendName(b)
	}
	return strings.Join(names, ", ")
}

func backendReasons(bs []Result) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = backendName(b) + " denies: " + b.Reason
	}
	return strings.Join(parts, "; ")
}

// addressless names, for a Service without a ready endpoint, the pods its
// selector picks that have no address of family: a pod is an endpoint
// once it has one. It is "" when there are none.
func (ix *index) addressless(svc *policyapi.Service, family int) string {
	if len(svc.Spec.Selector) == 0 {
		return ""
	}
	sel := policyapi.LabelSelector{MatchLabels: svc.Spec.Selector}
	var names []string
	for _, p := range ix.s.Pods {
		if policyapi.PodNamespace(p) != policyapi.NamespaceOrDefault(svc.Namespace) || p.Spec.HostNetwork {
			continue
		}
		if ok, _ := sel.Matches(p.Labels); !ok {
			continue
		}
		if !slices.ContainsFunc(podAddrs(p), func(a netip.Addr) bool { return familyOf(a) == family }) {
			names = append(names, policyapi.PodNamespace(p)+"/"+p.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return fmt.Sprintf(" (its selector picks %s, without an IPv%d address: a pod is an endpoint once it has one)", strings.Join(names, ", "), family)
}

// servicePorts lists svc's ports as PORT/PROTO.
func servicePorts(svc *policyapi.Service) string {
	var out []string
	for _, p := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%d/%s", p.Port, cmp.Or(p.Protocol, policyapi.TCP)))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
