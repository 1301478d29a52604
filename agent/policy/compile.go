package policy

import (
	"fmt"
	"net/netip"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// LocalEndpoint is a pod on this node with a host-side veth: one endpoint
// the dataplane enforces policy on.
type LocalEndpoint struct {
	// HostIfName is the host-side interface name; it keys Desired.Endpoints.
	HostIfName string
	// Namespace and PodName name the pod object, if the compiler has one.
	Namespace, PodName string
	// IPv4 and IPv6 are the addresses CNI gave the pod (the zero Addr when
	// it has none of a family); they become the anti-spoofing addresses.
	IPv4, IPv6 netip.Addr
}

// Snapshot is one consistent view of everything policy depends on.
type Snapshot struct {
	// Namespaces by name. A namespace that has pods or policies but no
	// object here has the labels {kubernetes.io/metadata.name: name}.
	Namespaces map[string]*policyapi.Namespace
	// Pods is every known pod, local and remote. Addresses are read from
	// Status.PodIPs (or Status.PodIP); the caller fills local pods' from
	// their CNI allocations.
	Pods []*policyapi.Pod
	// Policies is every NetworkPolicy. They are validated (and defaulted)
	// by Compile; an invalid one fails closed: the pods it selects get no
	// allow in the directions it applies to, and it is listed in
	// Desired.FailedPolicies.
	Policies []*policyapi.NetworkPolicy
	// Identities maps the IdentityKey of every pod that has an address or
	// a local endpoint to its identity (>= FirstPodIdentity). A missing
	// key is an error: the caller assigns identities before compiling.
	Identities map[string]policyapi.Peer
	// Local is the endpoints of this node.
	Local []LocalEndpoint
	// Services and EndpointSlices are every Service and EndpointSlice;
	// they give Desired.Services. A Service is validated (and defaulted)
	// by Compile, an invalid one fails the compilation; what a slice holds
	// that cannot be used (an address that does not parse) is left out.
	Services       []*policyapi.Service
	EndpointSlices []*policyapi.EndpointSlice
	// Node is the name of this node's Node, whose pods' connections the
	// Services are translated for: a Service of internalTrafficPolicy
	// Local translates to the endpoints whose nodeName it is. Empty (the
	// standalone agent) takes every endpoint as this node's.
	Node string
	// Zone is this node's zone (its Node's policyapi.ZoneLabel), which
	// endpoints' zone hints name (see policyapi.EndpointHints); empty
	// matches none.
	Zone string
	// NodeAddrs are this node's addresses (its Node's InternalIPs chosen
	// by the agent's --nodeport-addresses), where pods reach its NodePorts
	// (see ServiceEntry.External).
	NodeAddrs []netip.Addr
	// Limits bound what each namespace's policies, and all namespaces'
	// policies and Services, may ask of the node; a namespace over them
	// has its policies failed closed (see compileOrFail), or its Services
	// not translated (see Desired.ServicesOverCapacity). The zero Limits
	// bounds nothing.
	Limits Limits
}

// Compile computes the desired dataplane state of s. It does not modify s.
//
// Which pods count: hostNetwork pods are ignored (they share the node's
// addresses, and NetworkPolicy does not apply to them). Pods in phase
// Succeeded or Failed keep their identity but lose their addresses, which
// may already belong to a new pod — unless a local endpoint still holds
// them. An address claimed by a local endpoint belongs to that endpoint's
// pod; an address two remote pods claim goes to the first by
// namespace/name.
//
// A local endpoint whose pod object is unknown (CNI ADD ran before the
// manifest or API server told the agent about the pod) is not isolated in
// either direction and has no identity: no selector can pick it, its
// addresses have no Addrs entry and so count as non-pod addresses (only
// ipBlock peers match them). It still gets its anti-spoofing addresses.
// Once the pod object arrives the next compilation isolates it.
//
// Services: every ClusterIP (of both families; not a headless Service's
// "None", not an ExternalName Service) and port is a frontend, whose
// backends the Service's EndpointSlices give (see serviceEntries).
// A Service without a ready endpoint still has its frontends, with no
// backend. Services depend on nothing else in the snapshot: pods reach
// them through their slices, which is what kube-proxy reads too.
func Compile(s *Snapshot) (*Desired, error) {
	c := &compiler{
		s:        s,
		policies: make(map[string][]*policyapi.ParsedPolicy),
		idents:   make(map[policyapi.Peer]*identInfo),
		nsIdents: make(map[string][]*identInfo),
		owner:    make(map[netip.Addr]addrClaim),
		cache:    make(map[string][]policyapi.Peer),
		rules:    make(map[*policyapi.ParsedRule]*rulePeers),
		nsCache:  make(map[string][]string),
		inBlock:  make(map[string][]*identInfo),
		origins:  make(map[*policyapi.ParsedPolicy]*[2][]*RuleOrigin),
	}
	costs := map[string]policyCost{}
	compiled := make([]*policyapi.ParsedPolicy, len(s.Policies))
	errs := make([]error, len(s.Policies))
	for i, p := range s.Policies {
		compiled[i], errs[i] = policyapi.ParsePolicy(p)
		ns := policyNamespace(p)
		costs[ns] = costs[ns].add(costOf(p, errs[i] == nil))
	}
	budget := s.Limits.overBudget(costs)
	failed := map[string]string{}
	var blocks []*policyapi.CIDRBlock
	for i, p := range s.Policies {
		cp := failClosed(p, compiled[i], errs[i], budget[policyNamespace(p)])
		if cp.Failed != "" {
			failed[cp.Name] = cp.Failed
		}
		c.policies[cp.Namespace] = append(c.policies[cp.Namespace], cp)
		for _, rules := range cp.Rules {
			for _, r := range rules {
				for _, peer := range r.Peers {
					if peer.Block != nil {
						blocks = append(blocks, peer.Block)
					}
				}
			}
		}
	}
	c.classes = newCIDRClasses(blocks)
	if err := c.addPods(); err != nil {
		return nil, err
	}
	d := &Desired{
		Addrs:     make(map[netip.Addr]AddrEntry, len(c.owner)),
		CIDRs:     c.classes.lpm,
		Endpoints: make(map[string]*EndpointPolicy, len(s.Local)),

		FailedPolicies: failed,
	}
	for a, claim := range c.owner {
		if claim.ident == nil {
			continue // a local endpoint without a pod object
		}
		class := c.classes.classOf(a)
		d.Addrs[a] = AddrEntry{Identity: claim.ident.id, CIDRClass: class}
		if !slices.Contains(claim.ident.classes, class) {
			claim.ident.classes = append(claim.ident.classes, class)
		}
	}
	for i := range s.Local {
		le := &s.Local[i]
		if _, dup := d.Endpoints[le.HostIfName]; dup {
			return nil, fmt.Errorf("local endpoint %s listed twice", le.HostIfName)
		}
		d.Endpoints[le.HostIfName] = c.endpoint(le)
	}
	svcs, over, err := compileServices(s.Services, s.EndpointSlices, policyapi.Node{Name: s.Node, Zone: s.Zone, Addrs: s.NodeAddrs}, s.Limits)
	if err != nil {
		return nil, err
	}
	d.Services, d.ServicesOverCapacity = svcs, over
	return d, nil
}

// compiler holds one compilation's indexes and caches.
type compiler struct {
	s        *Snapshot
	policies map[string][]*policyapi.ParsedPolicy // by namespace
	classes  *cidrClasses

	pods     map[string]*policyapi.Pod     // namespace/name -> pod, pods that count
	idents   map[policyapi.Peer]*identInfo // by identity
	nsKeys   map[string][]byte             // namespace -> its identity key prefix
	keyBuf   []byte
	nsIdents map[string][]*identInfo // by namespace, in first-seen order
	owner    map[netip.Addr]addrClaim

	cache   map[string][]policyapi.Peer                   // selector peer -> identities
	rules   map[*policyapi.ParsedRule]*rulePeers          // the peers of each rule, once resolved
	nsCache map[string][]string                           // namespace selector -> namespaces
	inBlock map[string][]*identInfo                       // block key -> identities wholly inside it
	origins map[*policyapi.ParsedPolicy]*[2][]*RuleOrigin // the origins of each policy's rules, by direction, once made

	rb ruleBuilder // scratch of the endpoint being compiled
}

// identInfo is what selectors and named ports see of an identity.
type identInfo struct {
	id       policyapi.Peer
	key      string // IdentityKey, to catch one id given to two keys
	ns       string
	nsLabels map[string]string
	labels   map[string]string
	ports    []policyapi.NamedPort
	classes  []policyapi.Peer // CIDR classes of the identity's addresses
}

// addrClaim is who an address belongs to; ident is nil for a local
// endpoint without a pod object.
type addrClaim struct {
	podKey string
	local  bool
	ident  *identInfo
}

func (c *compiler) addPods() error {
	s := c.s
	c.pods = make(map[string]*policyapi.Pod, len(s.Pods))
	c.nsKeys = make(map[string][]byte)
	localByPod := make(map[string]*LocalEndpoint, len(s.Local))
	for i := range s.Local {
		le := &s.Local[i]
		key := le.Namespace + "/" + le.PodName
		localByPod[key] = le
		for _, a := range []netip.Addr{le.IPv4, le.IPv6} {
			if a.IsValid() {
				c.owner[a.Unmap()] = addrClaim{podKey: key, local: true}
			}
		}
	}
	for _, pod := range s.Pods {
		if pod.Spec.HostNetwork {
			continue
		}
		ns := policyapi.PodNamespace(pod)
		key := ns + "/" + pod.Name
		if _, dup := c.pods[key]; dup {
			return fmt.Errorf("pod %s listed twice", key)
		}
		c.pods[key] = pod
		addrs, err := policyapi.PodAddrs(pod)
		if err != nil {
			return err
		}
		le := localByPod[key]
		if pod.Status.Phase == policyapi.PodSucceeded || pod.Status.Phase == policyapi.PodFailed {
			addrs = nil
		}
		if le != nil {
			for _, a := range []netip.Addr{le.IPv4, le.IPv6} {
				if a.IsValid() && !slices.Contains(addrs, a.Unmap()) {
					addrs = append(addrs, a.Unmap())
				}
			}
		}
		if len(addrs) == 0 && le == nil {
			continue
		}
		info, err := c.identity(ns, pod)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			prev, taken := c.owner[a]
			switch {
			case !taken:
				c.owner[a] = addrClaim{podKey: key, ident: info}
			case prev.podKey == key:
				// The pod of the local endpoint that claimed a.
				prev.ident = info
				c.owner[a] = prev
			case prev.local:
				// The local endpoint's CNI allocation is authoritative.
			case key < prev.podKey:
				c.owner[a] = addrClaim{podKey: key, ident: info}
			}
		}
	}
	return nil
}

// identity returns the identity info of pod, creating it on first sight.
func (c *compiler) identity(ns string, pod *policyapi.Pod) (*identInfo, error) {
	nsObj := c.s.Namespaces[ns]
	prefix, ok := c.nsKeys[ns]
	if !ok {
		prefix = policyapi.AppendNamespaceKey(nil, ns, nsObj)
		c.nsKeys[ns] = prefix
	}
	c.keyBuf = policyapi.AppendPodKey(append(c.keyBuf[:0], prefix...), pod)
	id, ok := c.s.Identities[string(c.keyBuf)]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s: no identity for key %s (assign one per IdentityKey before compiling)", ns, pod.Name, c.keyBuf)
	}
	if id < policyapi.FirstPodIdentity || id&policyapi.CIDRClassBit != 0 {
		return nil, fmt.Errorf("pod %s/%s: identity %d out of the pod range [%d, %d)", ns, pod.Name, id, policyapi.FirstPodIdentity, policyapi.CIDRClassBit)
	}
	if info, ok := c.idents[id]; ok {
		if info.key != string(c.keyBuf) {
			return nil, fmt.Errorf("pod %s/%s: identity %d is assigned to two keys: %s and %s", ns, pod.Name, id, info.key, c.keyBuf)
		}
		return info, nil
	}
	info := &identInfo{
		id:       id,
		key:      string(c.keyBuf),
		ns:       ns,
		nsLabels: policyapi.NamespaceLabels(ns, nsObj),
		labels:   pod.Labels,
		ports:    policyapi.NamedPorts(pod),
	}
	c.idents[id] = info
	c.nsIdents[ns] = append(c.nsIdents[ns], info)
	return info, nil
}

// ruleOrigins returns the origins of cp's rules of direction d, made the
// first time: every endpoint cp selects shares them (see
// EndpointPolicy.Origins).
func (c *compiler) ruleOrigins(cp *policyapi.ParsedPolicy, d policyapi.Direction) []*RuleOrigin {
	os := c.origins[cp]
	if os == nil {
		os = new([2][]*RuleOrigin)
		c.origins[cp] = os
	}
	if os[d] == nil {
		os[d] = make([]*RuleOrigin, len(cp.Rules[d]))
		for i := range os[d] {
			os[d][i] = ruleOrigin(cp, d, i)
		}
	}
	return os[d]
}

// endpoint compiles the policy of one local endpoint. A direction that
// a failed policy selects it for, or whose rules need more port ranges
// than a key holds, has no rule at all (see EndpointPolicy.Failed).
func (c *compiler) endpoint(le *LocalEndpoint) *EndpointPolicy {
	ep := &EndpointPolicy{IPv4: le.IPv4.Unmap(), IPv6: le.IPv6}
	pod := c.pods[le.Namespace+"/"+le.PodName]
	if pod == nil {
		ep.Rules, ep.Origins = map[RuleKey][]PortRange{}, map[RuleKey]*RuleOrigin{}
		return ep // unknown pod: not isolated, see Compile
	}
	local := policyapi.NamedPorts(pod)
	var selecting [2][]*policyapi.ParsedPolicy
	for _, cp := range c.policies[policyapi.PodNamespace(pod)] {
		if !cp.PodSelector.Matches(pod.Labels) {
			continue
		}
		for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
			if cp.Applies[d] {
				selecting[d] = append(selecting[d], cp)
			}
		}
	}
	ep.FailedPolicies = failedNames(selecting)
	ep.Isolators = isolatorNames(selecting)
	for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
		if ep.Failed[d] = failedReasons(selecting[d]); ep.Failed[d] != "" {
			continue
		}
		for _, cp := range selecting[d] {
			origins := c.ruleOrigins(cp, d)
			for i, r := range cp.Rules[d] {
				c.rb.setOrigin(origins[i])
				c.addRule(&c.rb, d, cp, r, local)
			}
		}
	}
	ep.IngressIsolated = len(selecting[policyapi.Ingress]) > 0
	ep.EgressIsolated = len(selecting[policyapi.Egress]) > 0
	// The builder merges each key's ranges and leaves out a direction
	// with a key that needs too many: the first such key, in the order of
	// (peer, protocol), names the failure.
	ep.Rules = c.rb.build()
	ep.Origins = c.rb.origins()
	for d, o := range c.rb.over {
		if o.n == 0 {
			continue
		}
		var names []string
		for _, cp := range selecting[d] {
			names = append(names, cp.Name)
		}
		ep.Failed[d] = tooManyReason(o.k, o.n, names)
	}
	return ep
}

// allProtocols are the keys a rule without ports allows: every port of
// every port protocol, and every protocol without ports.
var allProtocols = []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP, policyapi.ProtoOther}

var allPorts = PortRange{0, 65535}

// addRule adds one rule of policy cp to b. local is the selected pod's
// named ports, against which ingress named ports resolve.
func (c *compiler) addRule(b *ruleBuilder, d policyapi.Direction, cp *policyapi.ParsedPolicy, r *policyapi.ParsedRule, local []policyapi.NamedPort) {
	rp := c.rulePeers(cp, r)
	add := func(peer policyapi.Peer, proto uint8, pr PortRange) {
		b.add(RuleKey{Peer: peer, Dir: d, Proto: proto}, pr)
	}
	if len(r.Ports) == 0 {
		for _, peer := range rp.peers {
			for _, proto := range allProtocols {
				add(peer, proto, allPorts)
			}
		}
		return
	}
	for _, spec := range r.Ports {
		switch {
		case spec.Name == "":
			for _, peer := range rp.peers {
				add(peer, spec.Proto, PortRange{spec.Lo, spec.Hi})
			}
		case d == policyapi.Ingress:
			for _, port := range policyapi.ResolveNamedPort(local, spec.Name, spec.Proto) {
				for _, peer := range rp.peers {
					add(peer, spec.Proto, PortRange{port, port})
				}
			}
		default:
			for _, pp := range c.egressNamed(rp, r, spec) {
				add(pp.peer, spec.Proto, PortRange{pp.port, pp.port})
			}
		}
	}
}

// rulePeers is a rule's resolved peers.
type rulePeers struct {
	all    bool                   // no from/to: every peer
	ids    []policyapi.Peer       // identities the selector peers pick, sorted
	blocks []*policyapi.CIDRBlock // the rule's ipBlock peers
	peers  []policyapi.Peer       // what numeric ports are keyed by: PeerAny, or ids and classes
	named  map[policyapi.PortSpec][]peerPort
}

type peerPort struct {
	peer policyapi.Peer
	port uint16
}

// rulePeers resolves (once per compilation) which peers rule r of cp
// allows.
func (c *compiler) rulePeers(cp *policyapi.ParsedPolicy, r *policyapi.ParsedRule) *rulePeers {
	if rp, ok := c.rules[r]; ok {
		return rp
	}
	rp := &rulePeers{all: len(r.Peers) == 0}
	if rp.all {
		rp.peers = []policyapi.Peer{policyapi.PeerAny}
	}
	var classes []policyapi.Peer
	for _, peer := range r.Peers {
		if peer.Block != nil {
			rp.blocks = append(rp.blocks, peer.Block)
			classes = append(classes, c.classes.classesOf(peer.Block)...)
			continue
		}
		rp.ids = append(rp.ids, c.selectorPeer(cp.Namespace, peer)...)
	}
	slices.Sort(rp.ids)
	rp.ids = slices.Compact(rp.ids)
	slices.Sort(classes)
	rp.peers = append(rp.peers, rp.ids...)
	rp.peers = append(rp.peers, slices.Compact(classes)...)
	c.rules[r] = rp
	return rp
}

// selectorPeer returns the identities a selector peer of a policy in
// namespace ns picks. A nil namespaceSelector means the policy's own
// namespace; a nil podSelector (with a namespaceSelector) means every pod
// of the selected namespaces.
func (c *compiler) selectorPeer(ns string, p policyapi.PolicyPeer) []policyapi.Peer {
	var key string
	if p.Namespace == nil {
		key = "pod\x00" + ns + "\x00" + p.Pod.Key()
	} else {
		key = "ns\x00" + p.Namespace.Key() + "\x00"
		if p.Pod != nil {
			key += "pod\x00" + p.Pod.Key()
		}
	}
	if ids, ok := c.cache[key]; ok {
		return ids
	}
	var ids []policyapi.Peer
	pick := func(infos []*identInfo) {
		for _, info := range infos {
			if p.Pod == nil || p.Pod.Matches(info.labels) {
				ids = append(ids, info.id)
			}
		}
	}
	if p.Namespace == nil {
		pick(c.nsIdents[ns])
	} else {
		for _, name := range c.namespaces(p.Namespace) {
			pick(c.nsIdents[name])
		}
	}
	c.cache[key] = ids
	return ids
}

// namespaces returns the namespaces (of those with identities) that sel
// matches.
func (c *compiler) namespaces(sel *policyapi.Selector) []string {
	key := sel.Key()
	if names, ok := c.nsCache[key]; ok {
		return names
	}
	names := []string{}
	for name, infos := range c.nsIdents {
		if sel.Matches(infos[0].nsLabels) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	c.nsCache[key] = names
	return names
}

// egressNamed resolves an egress named port against each destination's
// own container ports. Selector peers resolve per identity they pick;
// PeerAny and ipBlock peers expand to the identities of the pods in scope
// (for an ipBlock, identities all of whose addresses lie in the block:
// an identity is the finest thing a rule can name, so one straddling the
// block's edge is left out rather than let through everywhere). Non-pod
// addresses have no container ports, so a named port allows nothing to them.
func (c *compiler) egressNamed(rp *rulePeers, r *policyapi.ParsedRule, spec policyapi.PortSpec) []peerPort {
	if pp, ok := rp.named[spec]; ok {
		return pp
	}
	var out []peerPort
	resolve := func(info *identInfo) {
		for _, port := range policyapi.ResolveNamedPort(info.ports, spec.Name, spec.Proto) {
			out = append(out, peerPort{info.id, port})
		}
	}
	switch {
	case rp.all:
		for _, info := range c.idents {
			resolve(info)
		}
	default:
		for _, id := range rp.ids {
			resolve(c.idents[id])
		}
		for _, b := range rp.blocks {
			for _, info := range c.identsInBlock(b) {
				resolve(info)
			}
		}
	}
	slices.SortFunc(out, func(a, b peerPort) int {
		if a.peer != b.peer {
			return int(int64(a.peer) - int64(b.peer))
		}
		return int(a.port) - int(b.port)
	})
	out = slices.Compact(out)
	if rp.named == nil {
		rp.named = make(map[policyapi.PortSpec][]peerPort)
	}
	rp.named[spec] = out
	return out
}

// identsInBlock returns the identities with addresses, all of which lie in b.
func (c *compiler) identsInBlock(b *policyapi.CIDRBlock) []*identInfo {
	if infos, ok := c.inBlock[b.Key]; ok {
		return infos
	}
	infos := []*identInfo{}
	for _, info := range c.idents {
		if len(info.classes) == 0 {
			continue
		}
		inside := true
		for _, class := range info.classes {
			if !c.classes.inBlock(class, b) {
				inside = false
				break
			}
		}
		if inside {
			infos = append(infos, info)
		}
	}
	c.inBlock[b.Key] = infos
	return infos
}
