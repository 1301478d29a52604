package policy

import (
	"fmt"
	"net/netip"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// podState is what the compiler knows of one pod, by PodNamespace and
// name.
type podState struct {
	ref objKey
	key string // PodNamespace/name, the key Compile orders and matches pods by
	// pod is the pod the key names; nil once it is gone. hostNetwork pods
	// never count (see Compile).
	pod *policyapi.Pod
	// ident and addrs are set while the pod counts: it has addresses, or a
	// local endpoint. addrs are the addresses it claims.
	ident *identState
	addrs []netip.Addr
}

// identState is one identity in use: what selectors and named ports see
// of it, and how many counted pods hold it.
type identState struct {
	id       policyapi.Peer
	key      string
	ns       string
	nsLabels map[string]string
	labels   map[string]string
	ports    []policyapi.NamedPort
	refs     int
	// classes counts the addresses the identity owns by CIDR class
	// (usually one class).
	classes []classCount
	// announced: the selectors have seen the identity (see settleIdentities).
	announced bool
}

// classCount is how many addresses of one class an identity owns.
type classCount struct {
	class policyapi.Peer
	n     int
}

// addrState is who claims one address: the counted pods listing it (claim,
// and more in the rare case of several) and the local endpoint whose CNI
// allocation it is (the last one in the list, localKey its pod key).
// owner is the identity the address maps to (nil: no entry) and class its
// CIDR class.
type addrState struct {
	claim    *podState
	more     []*podState
	local    bool
	localKey string
	owner    *identState
	class    policyapi.Peer
}

// namespaceChanged re-identifies the pods of a namespace whose object
// changed: its labels are part of their identity keys.
func (st *state) namespaceChanged(name string, in *inputs) {
	delete(st.nsKeys, name)
	delete(st.nsLabels, name)
	for ps := range st.nsPods[name] {
		in.dirtyPods[ps.ref] = struct{}{}
	}
}

// identityChanged handles a new number for an identity key that pods
// still hold once the changed pods are detached (or the key's removal):
// the identity is retired and its holders are detached too, to take the
// key again with the dirty pods. The store never renumbers a key in use,
// so the scan of every pod here is a rare path.
func (st *state) identityChanged(key string, in *inputs) {
	x := st.idents[key]
	if x == nil || x.refs == 0 {
		return // acquire checks the number of a key it revives
	}
	if id, ok := in.identities[key]; ok && id == x.id {
		return
	}
	for _, ps := range st.pods {
		if ps.ident == x {
			st.detach(ps)
			in.dirtyPods[ps.ref] = struct{}{}
		}
	}
	st.retire(x)
}

// detachPod uncounts the pod k, which changed: its identity and address
// claims are taken again by attachPod, once every changed pod has let go
// of its own (a number a pod gives up may be another's new one).
func (st *state) detachPod(k objKey) {
	if ps := st.pods[k]; ps != nil {
		st.detach(ps)
	}
}

// attachPod brings the pod k up to date with the inputs. Pods given in
// namespace "" are the pods of "default".
func (st *state) attachPod(k objKey, in *inputs) error {
	var pod *policyapi.Pod
	for _, raw := range [2]objKey{k, {"", k.name}} {
		p := in.pods[raw]
		if p == nil || p.Spec.HostNetwork || (raw.ns == "" && k.ns != "default") {
			continue
		}
		if pod != nil {
			return errDuplicatePod(k.ns + "/" + k.name)
		}
		pod = p
	}
	ps := st.pods[k]
	if ps == nil {
		if pod == nil {
			return nil
		}
		ps = &podState{ref: k, key: k.ns + "/" + k.name}
		st.pods[k] = ps
		setAdd(st.nsPods, k.ns, ps)
	}
	if ps.pod != pod {
		for e := range st.epsByPod[ps.key] {
			st.markFull(e)
		}
	}
	if pod == nil {
		setDelete(st.nsPods, k.ns, ps)
		delete(st.pods, k)
		return nil
	}
	ps.pod = pod
	return st.attach(ps, in)
}

// attach counts the pod, as Compile does: its identity, and a claim on
// each of its addresses.
func (st *state) attach(ps *podState, in *inputs) error {
	pod := ps.pod
	addrs, err := policyapi.PodAddrs(pod)
	if err != nil {
		return err
	}
	if pod.Status.Phase == policyapi.PodSucceeded || pod.Status.Phase == policyapi.PodFailed {
		addrs = nil
	}
	le := st.localByPod[ps.key]
	if le != nil {
		for _, a := range []netip.Addr{le.IPv4, le.IPv6} {
			if a.IsValid() && !slices.Contains(addrs, a.Unmap()) {
				addrs = append(addrs, a.Unmap())
			}
		}
	}
	if len(addrs) == 0 && le == nil {
		return nil
	}
	x, err := st.acquire(pod, in)
	if err != nil {
		return err
	}
	ps.ident, ps.addrs = x, addrs
	for _, a := range addrs {
		as := st.addrs[a]
		if as == nil {
			as = &addrState{}
			st.addrs[a] = as
		}
		if as.claim == nil {
			as.claim = ps
		} else {
			as.more = append(as.more, ps)
		}
		st.resolve(a, as)
	}
	return nil
}

// detach undoes attach.
func (st *state) detach(ps *podState) {
	if ps.ident == nil {
		return
	}
	for _, a := range ps.addrs {
		as := st.addrs[a]
		if as.claim == ps {
			as.claim = nil
			if n := len(as.more); n > 0 {
				as.claim, as.more = as.more[n-1], as.more[:n-1]
			}
		} else {
			as.more = slices.DeleteFunc(as.more, func(p *podState) bool { return p == ps })
		}
		st.resolve(a, as)
	}
	x := ps.ident
	x.refs--
	if x.refs == 0 {
		st.pendingIdents[x] = struct{}{}
	}
	ps.ident, ps.addrs = nil, nil
}

// acquire returns the identity of pod, taking a reference; a new one is
// announced to the selectors once the pods have settled.
func (st *state) acquire(pod *policyapi.Pod, in *inputs) (*identState, error) {
	ns := policyapi.PodNamespace(pod)
	prefix, ok := st.nsKeys[ns]
	if !ok {
		prefix = policyapi.AppendNamespaceKey(nil, ns, in.namespaces[ns])
		st.nsKeys[ns] = prefix
	}
	buf := policyapi.AppendPodKey(append(make([]byte, 0, 2*len(prefix)), prefix...), pod)
	x := st.idents[string(buf)]
	if x != nil && x.refs == 0 {
		if id, ok := in.identities[x.key]; !ok || id != x.id {
			st.retire(x) // renumbered since its last pod left: start over
			x = nil
		}
	}
	if x == nil {
		key := string(buf)
		id, ok := in.identities[key]
		if !ok {
			return nil, fmt.Errorf("pod %s/%s: no identity for key %s (assign one per IdentityKey before compiling)", ns, pod.Name, key)
		}
		if id < policyapi.FirstPodIdentity || id&policyapi.CIDRClassBit != 0 {
			return nil, fmt.Errorf("pod %s/%s: identity %d out of the pod range [%d, %d)", ns, pod.Name, id, policyapi.FirstPodIdentity, policyapi.CIDRClassBit)
		}
		if other := st.byID[id]; other != nil {
			if other.refs > 0 {
				return nil, fmt.Errorf("pod %s/%s: identity %d is assigned to two keys: %s and %s", ns, pod.Name, id, other.key, key)
			}
			st.retire(other) // its last pod left in this compilation
		}
		nsLabels, ok := st.nsLabels[ns]
		if !ok {
			nsLabels = policyapi.NamespaceLabels(ns, in.namespaces[ns])
			st.nsLabels[ns] = nsLabels
		}
		x = &identState{
			id:       id,
			key:      key,
			ns:       ns,
			nsLabels: nsLabels,
			labels:   pod.Labels,
			ports:    policyapi.NamedPorts(pod),
		}
		st.idents[key] = x
		st.byID[id] = x
		st.identsChanged()
		st.pendingIdents[x] = struct{}{}
	}
	x.refs++
	return x, nil
}

// resolve recomputes who owns address a, as Compile decides it: the pod of
// the local endpoint that claims it, else the first counted pod by key.
func (st *state) resolve(a netip.Addr, as *addrState) {
	var owner *identState
	if as.local {
		if as.claim != nil && as.claim.key == as.localKey {
			owner = as.claim.ident
		}
		for _, p := range as.more {
			if p.key == as.localKey {
				owner = p.ident
			}
		}
	} else if first := as.claim; first != nil {
		for _, p := range as.more {
			if p.key < first.key {
				first = p
			}
		}
		owner = first.ident
	}
	if owner != as.owner {
		if as.owner != nil {
			st.countClass(as.owner, as.class, -1)
		}
		if owner != nil {
			as.class = st.classes.classOf(a)
			st.countClass(owner, as.class, +1)
		}
		as.owner = owner
		st.dirtyAddrs[a] = struct{}{}
	}
	if as.claim == nil && !as.local {
		delete(st.addrs, a)
	}
}

// countClass adds n addresses of class to x's count; a class appearing or
// disappearing changes which ipBlocks x lies wholly inside.
func (st *state) countClass(x *identState, class policyapi.Peer, n int) {
	i := slices.IndexFunc(x.classes, func(c classCount) bool { return c.class == class })
	if i < 0 {
		x.classes = append(x.classes, classCount{class: class})
		i = len(x.classes) - 1
	}
	x.classes[i].n += n
	switch x.classes[i].n {
	case 0:
		x.classes = slices.Delete(x.classes, i, i+1)
		st.classChanged[x] = struct{}{}
		st.identsChanged()
	case n:
		st.classChanged[x] = struct{}{}
		st.identsChanged()
	}
}

// reclassAddrs gives every owned address its class in a new class table.
func (st *state) reclassAddrs() {
	for a, as := range st.addrs {
		if as.owner == nil {
			continue
		}
		if class := st.classes.classOf(a); class != as.class {
			st.countClass(as.owner, as.class, -1)
			as.class = class
			st.countClass(as.owner, as.class, +1)
			st.dirtyAddrs[a] = struct{}{}
		}
	}
	st.classesChanged = false
}

// settleIdentities tells the selectors about the identities that
// appeared and disappeared while the pods changed. Retirements go first:
// a number may pass from a retired identity to a new one.
func (st *state) settleIdentities() {
	for x := range st.pendingIdents {
		if x.refs == 0 {
			st.retire(x)
		}
	}
	for x := range st.pendingIdents {
		if x.refs > 0 && !x.announced {
			st.announce(x)
		}
	}
	reset(&st.pendingIdents)
	for x := range st.classChanged {
		if x.announced {
			for r := range st.blockNamed {
				st.markRule(r, x.id)
			}
		}
	}
	reset(&st.classChanged)
}

// announce adds x to the selectors that pick it.
func (st *state) announce(x *identState) {
	x.announced = true
	setAdd(st.nsIdents, x.ns, x)
	pick := func(s *selPeer) {
		if s.matches(x) {
			s.members[x.id] = struct{}{}
			s.ver = st.next()
			for r := range s.users {
				st.markRule(r, x.id)
			}
		}
	}
	for s := range st.scopedPeers[x.ns] {
		pick(s)
	}
	for s := range st.globalPeers {
		pick(s)
	}
	st.markNamed(x.id)
}

// retire forgets x, which no counted pod holds any more.
func (st *state) retire(x *identState) {
	delete(st.pendingIdents, x)
	delete(st.classChanged, x)
	if st.idents[x.key] == x {
		delete(st.idents, x.key)
	}
	if st.byID[x.id] == x {
		delete(st.byID, x.id)
		st.identsChanged()
	}
	if !x.announced {
		return
	}
	x.announced = false
	setDelete(st.nsIdents, x.ns, x)
	drop := func(s *selPeer) {
		if _, ok := s.members[x.id]; ok {
			delete(s.members, x.id)
			s.ver = st.next()
			for r := range s.users {
				st.markRule(r, x.id)
			}
		}
	}
	for s := range st.scopedPeers[x.ns] {
		drop(s)
	}
	for s := range st.globalPeers {
		drop(s)
	}
	st.markNamed(x.id)
}

// markNamed marks identity id dirty wherever an egress named port
// resolves against every identity or the identities inside ipBlocks.
func (st *state) markNamed(id policyapi.Peer) {
	for r := range st.allNamed {
		st.markRule(r, id)
	}
	for r := range st.blockNamed {
		st.markRule(r, id)
	}
}

// setLocal applies a new list of local endpoints: which endpoints exist,
// which pod each names, and which addresses are CNI allocations.
func (st *state) setLocal(in *inputs) error {
	local := in.local
	byPod := make(map[string]*LocalEndpoint, len(local))
	seen := make(map[string]bool, len(local))
	for i := range local {
		le := &local[i]
		if seen[le.HostIfName] {
			return fmt.Errorf("local endpoint %s listed twice", le.HostIfName)
		}
		seen[le.HostIfName] = true
		byPod[le.Namespace+"/"+le.PodName] = le
	}
	// A pod whose local endpoint changed claims other addresses.
	for k, old := range st.localByPod {
		if le := byPod[k]; le == nil || *le != *old {
			markLocalPod(in, old)
		}
	}
	for k, le := range byPod {
		if st.localByPod[k] == nil {
			markLocalPod(in, le)
		}
	}
	// The local claim of every address the old or new list names.
	claims := localClaims(local)
	for a := range localClaims(st.local) {
		if _, ok := claims[a]; !ok {
			claims[a] = ""
		}
	}
	for a, key := range claims {
		as := st.addrs[a]
		if as == nil {
			if key == "" {
				continue
			}
			as = &addrState{}
			st.addrs[a] = as
		}
		if as.local != (key != "") || as.localKey != key {
			as.local, as.localKey = key != "", key
			st.resolve(a, as)
		}
	}
	// Endpoints.
	for i := range local {
		le := local[i]
		e := st.eps[le.HostIfName]
		if e == nil {
			e = &endpointState{}
			if st.prev != nil {
				e.out = st.prev.Endpoints[le.HostIfName]
			}
			st.eps[le.HostIfName] = e
			st.epsChanged = true
		} else if e.le == le {
			continue
		} else {
			setDelete(st.epsByPod, e.podKey, e)
		}
		e.le, e.podKey = le, le.Namespace+"/"+le.PodName
		setAdd(st.epsByPod, e.podKey, e)
		st.markFull(e)
	}
	for name, e := range st.eps {
		if !seen[name] {
			st.removeEndpoint(name, e)
		}
	}
	st.local, st.localByPod = local, byPod
	return nil
}

// markLocalPod marks the pod of local endpoint le changed. A pod given in
// namespace "" is "default"'s, which le must name.
func markLocalPod(in *inputs, le *LocalEndpoint) {
	if le.Namespace != "" {
		in.dirtyPods[objKey{le.Namespace, le.PodName}] = struct{}{}
	}
}

// localClaims maps each address of the local endpoints to the pod key of
// the last endpoint listing it.
func localClaims(local []LocalEndpoint) map[netip.Addr]string {
	m := make(map[netip.Addr]string, 2*len(local))
	for _, le := range local {
		for _, a := range []netip.Addr{le.IPv4, le.IPv6} {
			if a.IsValid() {
				m[a.Unmap()] = le.Namespace + "/" + le.PodName
			}
		}
	}
	return m
}

// setAdd and setDelete maintain a map of sets.
func setAdd[K comparable, V comparable](m map[K]map[V]struct{}, k K, v V) {
	s := m[k]
	if s == nil {
		s = map[V]struct{}{}
		m[k] = s
	}
	s[v] = struct{}{}
}

func setDelete[K comparable, V comparable](m map[K]map[V]struct{}, k K, v V) {
	if s := m[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}
