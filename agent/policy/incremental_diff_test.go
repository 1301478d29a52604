package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// world is a random cluster that changes one edit at a time. It feeds an
// Incremental compiler as the agent does and builds the Snapshot the full
// Compile gets for the same objects. The universe is small (four
// namespaces, two dozen pods and addresses, a few ipBlocks) so that
// selectors, named ports, address claims and identities collide often.
type world struct {
	rng        *rand.Rand
	namespaces map[string]*policyapi.Namespace
	pods       map[objKey]*policyapi.Pod
	policies   map[objKey]*policyapi.NetworkPolicy
	services   map[objKey]*policyapi.Service
	slices     map[objKey]*policyapi.EndpointSlice
	identities map[string]policyapi.Peer // as the compilers get them
	clean      map[string]policyapi.Peer // as the store would number them
	local      []LocalEndpoint
	// faults breaks the identity table the compilers get (a missing key,
	// a number given to two keys) for one step.
	faults bool
	// failed: the last compilation failed; edits then often heal the world.
	failed bool
	// limits bound the Services (Limits.ServiceFrontends), small enough
	// for the world's namespaces to go over them and come back.
	limits Limits
	inc    *Incremental
}

var (
	worldNamespaces = []string{"a", "b", "c", "default"}
	worldLabelKeys  = []string{"app", "tier", "env"}
	worldLabelVals  = []string{"x", "y", "z"}
	worldPortNames  = []string{"http", "dns", "metrics"}
	worldPortNums   = []int32{53, 80, 81, 8080, 9090}
	worldBlocks     = []policyapi.IPBlock{
		{CIDR: "10.0.0.0/28", Except: []string{"10.0.0.8/30"}},
		{CIDR: "10.0.0.0/24"},
		{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}},
		{CIDR: "10.0.0.4/30"},
		{CIDR: "fd00::/64", Except: []string{"fd00::/126"}},
		{CIDR: "10.0.0.0/8", Except: []string{"10.0.0.0/29", "10.0.0.12/30"}},
	}
)

func newWorld(seed uint64) *world {
	w := &world{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		namespaces: map[string]*policyapi.Namespace{},
		pods:       map[objKey]*policyapi.Pod{},
		policies:   map[objKey]*policyapi.NetworkPolicy{},
		services:   map[objKey]*policyapi.Service{},
		slices:     map[objKey]*policyapi.EndpointSlice{},
		identities: map[string]policyapi.Peer{},
		clean:      map[string]policyapi.Peer{},
		inc:        NewIncremental(),
	}
	if seed%2 == 0 {
		w.limits = worldServiceLimits[1]
		w.inc.SetLimits(w.limits)
	}
	return w
}

// worldServiceLimits are the Service bounds a world may have: none, or
// about what two of its namespaces' Services hold.
var worldServiceLimits = []Limits{{}, {ServiceFrontends: 8, ServiceBackends: 12}, {ServiceFrontends: 12}, {ServiceBackends: 8}}

func (w *world) pick(xs []string) string { return xs[w.rng.IntN(len(xs))] }

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

func (w *world) labels(keys, vals []string, n int) map[string]string {
	m := map[string]string{}
	for range w.rng.IntN(n + 1) {
		m[w.pick(keys)] = w.pick(vals)
	}
	return m
}

// addr returns one of 16 IPv4 and 4 IPv6 addresses.
func (w *world) addr() netip.Addr {
	if n := w.rng.IntN(20); n < 16 {
		return netip.AddrFrom4([4]byte{10, 0, 0, byte(n + 1)})
	} else {
		return netip.MustParseAddr(fmt.Sprintf("fd00::%d", n-15))
	}
}

func (w *world) namespace() *policyapi.Namespace {
	name := w.pick(worldNamespaces)
	ns := &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: name, Labels: w.labels([]string{"team", "env"}, []string{"t1", "t2", "prod"}, 2)}}
	if w.chance(0.3) {
		ns.Labels[policyapi.NamespaceNameLabel] = name
	}
	return ns
}

func (w *world) pod() *policyapi.Pod {
	ns := w.pick(worldNamespaces)
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", w.rng.IntN(6)), Labels: w.labels(worldLabelKeys, worldLabelVals, 2)}}
	if ns == "default" && w.chance(0.05) {
		p.Namespace = "" // the same pod key as "default"
	}
	var ports []policyapi.ContainerPort
	for range w.rng.IntN(3) {
		proto := []policyapi.Protocol{"", policyapi.TCP, policyapi.UDP, policyapi.SCTP}[w.rng.IntN(4)]
		ports = append(ports, policyapi.ContainerPort{Name: w.pick(worldPortNames), ContainerPort: worldPortNums[w.rng.IntN(len(worldPortNums))], Protocol: proto})
	}
	if len(ports) > 0 {
		p.Spec.Containers = []policyapi.Container{{Name: "c", Ports: ports}}
	}
	for range w.rng.IntN(3) {
		p.Status.PodIPs = append(p.Status.PodIPs, policyapi.PodIP{IP: w.addr().String()})
	}
	if len(p.Status.PodIPs) > 0 && w.chance(0.3) {
		p.Status.PodIP, p.Status.PodIPs = p.Status.PodIPs[0].IP, nil
	}
	switch {
	case w.chance(0.005):
		p.Status.PodIPs = append(p.Status.PodIPs, policyapi.PodIP{IP: "not-an-address"})
	case w.chance(0.1):
		p.Status.Phase = []policyapi.PodPhase{policyapi.PodSucceeded, policyapi.PodFailed}[w.rng.IntN(2)]
	case w.chance(0.05):
		p.Spec.HostNetwork = true
	}
	return p
}

func (w *world) selector() *policyapi.LabelSelector {
	s := &policyapi.LabelSelector{}
	switch w.rng.IntN(5) {
	case 0: // empty: everything
	case 1, 2:
		s.MatchLabels = map[string]string{w.pick(worldLabelKeys): w.pick(worldLabelVals)}
	default:
		op := []policyapi.LabelSelectorOperator{policyapi.OpIn, policyapi.OpNotIn, policyapi.OpExists, policyapi.OpDoesNotExist}[w.rng.IntN(4)]
		req := policyapi.LabelSelectorRequirement{Key: w.pick(worldLabelKeys), Operator: op}
		if op == policyapi.OpIn || op == policyapi.OpNotIn {
			req.Values = []string{w.pick(worldLabelVals), w.pick(worldLabelVals)}
		}
		s.MatchExpressions = []policyapi.LabelSelectorRequirement{req}
	}
	return s
}

func (w *world) nsSelector() *policyapi.LabelSelector {
	switch w.rng.IntN(4) {
	case 0:
		return &policyapi.LabelSelector{}
	case 1:
		return &policyapi.LabelSelector{MatchLabels: map[string]string{policyapi.NamespaceNameLabel: w.pick(worldNamespaces)}}
	default:
		return &policyapi.LabelSelector{MatchLabels: map[string]string{"team": w.pick([]string{"t1", "t2"})}}
	}
}

func (w *world) peers() []policyapi.NetworkPolicyPeer {
	var out []policyapi.NetworkPolicyPeer
	for range w.rng.IntN(3) {
		switch w.rng.IntN(4) {
		case 0:
			out = append(out, policyapi.NetworkPolicyPeer{PodSelector: w.selector()})
		case 1:
			out = append(out, policyapi.NetworkPolicyPeer{NamespaceSelector: w.nsSelector()})
		case 2:
			out = append(out, policyapi.NetworkPolicyPeer{NamespaceSelector: w.nsSelector(), PodSelector: w.selector()})
		default:
			b := worldBlocks[w.rng.IntN(len(worldBlocks))]
			out = append(out, policyapi.NetworkPolicyPeer{IPBlock: &b})
		}
	}
	return out
}

func (w *world) ports() []policyapi.NetworkPolicyPort {
	var out []policyapi.NetworkPolicyPort
	n := w.rng.IntN(3)
	if w.chance(0.005) {
		n = MaxPortRanges + 1 // more single ports than one rule key can hold
	}
	for i := range n {
		var p policyapi.NetworkPolicyPort
		if w.chance(0.4) {
			proto := []policyapi.Protocol{policyapi.TCP, policyapi.UDP, policyapi.SCTP}[w.rng.IntN(3)]
			p.Protocol = &proto
		}
		switch {
		case n == MaxPortRanges+1:
			p.Port = policyapi.FromInt(int32(1000 + 2*i))
			p.Protocol = nil
		case w.chance(0.4):
			p.Port = policyapi.FromString(w.pick(worldPortNames))
		case w.chance(0.5):
			p.Port = policyapi.FromInt(worldPortNums[w.rng.IntN(len(worldPortNums))])
			if w.chance(0.5) {
				end := p.Port.IntVal + int32(w.rng.IntN(30))
				p.EndPort = &end
			}
		}
		out = append(out, p)
	}
	return out
}

func (w *world) policy() *policyapi.NetworkPolicy {
	np := &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: w.pick(worldNamespaces), Name: fmt.Sprintf("np%d", w.rng.IntN(5))}}
	np.Spec.PodSelector = *w.selector()
	for range w.rng.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, policyapi.IngressRule{Ports: w.ports(), From: w.peers()})
	}
	for range w.rng.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{Ports: w.ports(), To: w.peers()})
	}
	switch w.rng.IntN(5) {
	case 0:
		np.Spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeIngress}
	case 1:
		np.Spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeEgress}
	case 2:
		np.Spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress}
	}
	if w.chance(0.005) {
		np.Spec.PolicyTypes = []policyapi.PolicyType{"Sideways"} // invalid
	}
	return np
}

// tweakPolicy returns a copy of an existing policy with one rule's ports
// or peers replaced (a new policy when there is none), so that the
// compilers see edits that keep most rules as they were.
func (w *world) tweakPolicy() *policyapi.NetworkPolicy {
	keys := slices.SortedFunc(maps.Keys(w.policies), compareObjKey)
	if len(keys) == 0 {
		return w.policy()
	}
	old := w.policies[keys[w.rng.IntN(len(keys))]]
	np := *old
	np.Spec.Ingress, np.Spec.Egress = slices.Clone(old.Spec.Ingress), slices.Clone(old.Spec.Egress)
	switch {
	case len(np.Spec.Ingress) > 0 && w.chance(0.5):
		i := w.rng.IntN(len(np.Spec.Ingress))
		if w.chance(0.5) {
			np.Spec.Ingress[i].Ports = w.ports()
		} else {
			np.Spec.Ingress[i].From = w.peers()
		}
	case len(np.Spec.Egress) > 0:
		i := w.rng.IntN(len(np.Spec.Egress))
		if w.chance(0.5) {
			np.Spec.Egress[i].Ports = w.ports()
		} else {
			np.Spec.Egress[i].To = w.peers()
		}
	default:
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{Ports: w.ports(), To: w.peers()})
	}
	return &np
}

// localList returns a new list of up to four local endpoints, naming
// existing pods mostly, with addresses that may collide.
func (w *world) localList() []LocalEndpoint {
	var out []LocalEndpoint
	for i := range w.rng.IntN(5) {
		le := LocalEndpoint{HostIfName: fmt.Sprintf("lxc%d", i), Namespace: w.pick(worldNamespaces), PodName: fmt.Sprintf("p%d", w.rng.IntN(7))}
		if w.chance(0.01) && i > 0 {
			le.HostIfName = "lxc0" // listed twice
		}
		if w.chance(0.9) {
			le.IPv4 = netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + w.rng.IntN(16))})
		}
		if w.chance(0.3) {
			le.IPv6 = netip.MustParseAddr(fmt.Sprintf("fd00::%d", 1+w.rng.IntN(4)))
		}
		out = append(out, le)
	}
	return out
}

// edit makes one random change and tells the compiler about it.
func (w *world) edit() {
	w.faults = false
	if w.failed && w.chance(0.3) {
		w.heal()
	}
	if w.chance(0.25) {
		w.editService()
		w.assignIdentities()
		return
	}
	switch n := w.rng.IntN(100); {
	case n < 8:
		ns := w.namespace()
		w.namespaces[ns.Name] = ns
		w.inc.SetNamespace(ns)
	case n < 11:
		name := w.pick(worldNamespaces)
		delete(w.namespaces, name)
		w.inc.DeleteNamespace(name)
	case n < 45:
		p := w.pod()
		w.pods[objKey{p.Namespace, p.Name}] = p
		w.inc.SetPod(p)
	case n < 55:
		k := objKey{w.pick(worldNamespaces), fmt.Sprintf("p%d", w.rng.IntN(6))}
		delete(w.pods, k)
		w.inc.DeletePod(k.ns, k.name)
	case n < 65:
		np := w.policy()
		w.policies[objKey{np.Namespace, np.Name}] = np
		w.inc.SetPolicy(np)
	case n < 75:
		np := w.tweakPolicy()
		w.policies[objKey{np.Namespace, np.Name}] = np
		w.inc.SetPolicy(np)
	case n < 82:
		k := objKey{w.pick(worldNamespaces), fmt.Sprintf("np%d", w.rng.IntN(5))}
		delete(w.policies, k)
		w.inc.DeletePolicy(k.ns, k.name)
	case n < 95:
		w.local = w.localList()
		w.inc.SetLocal(w.local)
	default:
		w.faults = w.chance(0.5)
	}
	w.assignIdentities()
}

// heal removes what makes compilations fail: invalid pods and policies,
// pods listed twice, policies with too many ports, a local endpoint
// listed twice.
func (w *world) heal() {
	for k, p := range w.pods {
		if p.Validate() != nil || (p.Namespace == "" && w.pods[objKey{"default", p.Name}] != nil) {
			delete(w.pods, k)
			w.inc.DeletePod(k.ns, k.name)
		}
	}
	for k, np := range w.policies {
		many := false
		for _, r := range np.Spec.Ingress {
			many = many || len(r.Ports) > 3
		}
		for _, r := range np.Spec.Egress {
			many = many || len(r.Ports) > 3
		}
		if many || np.Validate() != nil {
			delete(w.policies, k)
			w.inc.DeletePolicy(k.ns, k.name)
		}
	}
	w.local = slices.DeleteFunc(w.local, func(le LocalEndpoint) bool { return le.HostIfName == "lxc0" && le != w.local[0] })
	w.inc.SetLocal(w.local)
}

// assignIdentities numbers the identity keys of the pods as the store
// does (a new key takes the highest number + 1, a key no pod holds is
// deleted), breaks the numbering when faults is set, and feeds the
// differences.
func (w *world) assignIdentities() {
	want := map[string]bool{}
	for _, p := range w.pods {
		want[policyapi.IdentityKey(w.namespaces[policyapi.PodNamespace(p)], p)] = true
	}
	for k := range w.clean {
		if !want[k] {
			delete(w.clean, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := w.clean[k]; !ok {
			top := policyapi.FirstPodIdentity - 1
			for _, id := range w.clean {
				top = max(top, id)
			}
			w.clean[k] = top + 1
		}
	}
	next := maps.Clone(w.clean)
	if w.faults && len(next) >= 2 {
		keys := slices.Sorted(maps.Keys(next))
		delete(next, keys[0])
		next[keys[len(keys)-1]] = next[keys[len(keys)-2]]
	}
	for k := range w.identities {
		if _, ok := next[k]; !ok {
			w.inc.DeleteIdentity(k)
		}
	}
	for k, id := range next {
		w.inc.SetIdentity(k, id)
	}
	w.identities = next
}

// snapshot is the full compiler's view of the world, pods and policies in
// a random order (the result must not depend on it).
func (w *world) snapshot() *Snapshot {
	s := &Snapshot{Namespaces: maps.Clone(w.namespaces), Identities: maps.Clone(w.identities), Local: slices.Clone(w.local), Limits: w.limits}
	for _, p := range w.pods {
		s.Pods = append(s.Pods, p)
	}
	for _, np := range w.policies {
		s.Policies = append(s.Policies, np)
	}
	for _, svc := range w.services {
		s.Services = append(s.Services, svc)
	}
	for _, sl := range w.slices {
		s.EndpointSlices = append(s.EndpointSlices, sl)
	}
	w.rng.Shuffle(len(s.Services), func(i, j int) { s.Services[i], s.Services[j] = s.Services[j], s.Services[i] })
	w.rng.Shuffle(len(s.EndpointSlices), func(i, j int) {
		s.EndpointSlices[i], s.EndpointSlices[j] = s.EndpointSlices[j], s.EndpointSlices[i]
	})
	w.rng.Shuffle(len(s.Pods), func(i, j int) { s.Pods[i], s.Pods[j] = s.Pods[j], s.Pods[i] })
	w.rng.Shuffle(len(s.Policies), func(i, j int) { s.Policies[i], s.Policies[j] = s.Policies[j], s.Policies[i] })
	return s
}

// deepCopy copies d's content, to check later that nobody modified it.
func deepCopy(d *Desired) *Desired {
	c := &Desired{Addrs: maps.Clone(d.Addrs), CIDRs: maps.Clone(d.CIDRs), Endpoints: map[string]*EndpointPolicy{}, FailedPolicies: maps.Clone(d.FailedPolicies),
		ServicesOverCapacity: maps.Clone(d.ServicesOverCapacity)}
	for name, ep := range d.Endpoints {
		e := *ep
		e.Rules = map[RuleKey][]PortRange{}
		for k, v := range ep.Rules {
			e.Rules[k] = slices.Clone(v)
		}
		e.Origins = map[RuleKey]*RuleOrigin{}
		for k, o := range ep.Origins {
			c := *o
			e.Origins[k] = &c
		}
		c.Endpoints[name] = &e
	}
	if d.Services != nil {
		c.Services = map[ServiceFrontend]*ServiceEntry{}
		for fe, e := range d.Services {
			ce := *e
			ce.Backends = slices.Clone(e.Backends)
			c.Services[fe] = &ce
		}
	}
	return c
}

// diffDesired describes how got differs from want, "" when equal.
func diffDesired(got, want *Desired) string {
	var out []string
	if !maps.Equal(got.Addrs, want.Addrs) {
		for a, e := range want.Addrs {
			if g, ok := got.Addrs[a]; !ok || g != e {
				out = append(out, fmt.Sprintf("addr %s: got %+v (present %v), want %+v", a, g, ok, e))
			}
		}
		for a, g := range got.Addrs {
			if _, ok := want.Addrs[a]; !ok {
				out = append(out, fmt.Sprintf("addr %s: got %+v, want none", a, g))
			}
		}
	}
	if !maps.Equal(got.CIDRs, want.CIDRs) {
		out = append(out, fmt.Sprintf("cidrs: got %v, want %v", got.CIDRs, want.CIDRs))
	}
	if !maps.Equal(got.FailedPolicies, want.FailedPolicies) {
		out = append(out, fmt.Sprintf("failed policies: got %v, want %v", got.FailedPolicies, want.FailedPolicies))
	}
	if !maps.Equal(got.ServicesOverCapacity, want.ServicesOverCapacity) {
		out = append(out, fmt.Sprintf("services over capacity: got %v, want %v", got.ServicesOverCapacity, want.ServicesOverCapacity))
	}
	for name, we := range want.Endpoints {
		ge := got.Endpoints[name]
		switch {
		case ge == nil:
			out = append(out, "endpoint "+name+" missing")
		case !reflect.DeepEqual(*ge, *we):
			out = append(out, fmt.Sprintf("endpoint %s: got %+v, want %+v", name, *ge, *we))
		}
	}
	for name := range got.Endpoints {
		if want.Endpoints[name] == nil {
			out = append(out, "endpoint "+name+" not wanted")
		}
	}
	if (got.Services == nil) != (want.Services == nil) {
		out = append(out, fmt.Sprintf("services: got nil %v, want nil %v", got.Services == nil, want.Services == nil))
	}
	for fe, we := range want.Services {
		switch ge := got.Services[fe]; {
		case ge == nil:
			out = append(out, fmt.Sprintf("service frontend %+v missing", fe))
		case !reflect.DeepEqual(*ge, *we):
			out = append(out, fmt.Sprintf("service frontend %+v: got %+v, want %+v", fe, *ge, *we))
		}
	}
	for fe := range got.Services {
		if want.Services[fe] == nil {
			out = append(out, fmt.Sprintf("service frontend %+v not wanted", fe))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
