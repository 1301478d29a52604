package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Incremental compiles the desired state of a cluster that changes a few
// objects at a time. It keeps the inputs it was given and what it derived
// from them (compiled policies, the identities each selector picks, who owns
// every address, each endpoint's rules), and Compile recomputes only what
// the objects set or deleted since the last Compile affect: a policy edit
// costs the endpoints that policy selects, where only the rules it changed
// are resolved again (see ruleCache), a pod joining an identity costs one
// address, a new identity costs the rules whose selectors pick it.
//
// Its result is, object for object, what [Compile] returns for a [Snapshot]
// of the same inputs, errors included (a randomized differential test
// holds it to that). After an error the next Compile starts over from the
// inputs, so an error never leaves stale state behind.
//
// Successive results share what did not change (see [Desired]). The
// compiler keeps references to the objects it is given and reads them in
// later compilations: treat them as immutable, as the store does. An
// Incremental is not safe for concurrent use.
type Incremental struct {
	in inputs
	st *state // nil: Compile rebuilds from in
	// last is the last result, whose unchanged parts a rebuild reuses.
	last *Desired
}

// objKey names a namespaced object as it was given.
type objKey struct{ ns, name string }

// inputs are the objects as last set, and which changed since the last
// Compile.
type inputs struct {
	namespaces map[string]*policyapi.Namespace
	pods       map[objKey]*policyapi.Pod
	policies   map[objKey]*policyapi.NetworkPolicy
	identities map[string]policyapi.Peer
	local      []LocalEndpoint
	svc        serviceInputs

	// limits, what every policy costs, the costs of each namespace, and
	// the namespaces over budget as of the last Compile (see Limits).
	limits   Limits
	cost     map[objKey]policyCost
	nsCost   map[string]policyCost
	nsBudget map[string]string
	// costChanged: a policy was set or deleted since updateBudget last ran.
	costChanged bool

	dirtyNS       map[string]struct{}
	dirtyPods     map[objKey]struct{} // by PodNamespace and name
	dirtyPolicies map[objKey]struct{}
	dirtyIDs      map[string]struct{}
	dirtyLocal    bool
}

// NewIncremental returns a compiler with no objects.
func NewIncremental() *Incremental {
	return &Incremental{in: inputs{
		namespaces:    map[string]*policyapi.Namespace{},
		pods:          map[objKey]*policyapi.Pod{},
		policies:      map[objKey]*policyapi.NetworkPolicy{},
		identities:    map[string]policyapi.Peer{},
		dirtyNS:       map[string]struct{}{},
		dirtyPods:     map[objKey]struct{}{},
		dirtyPolicies: map[objKey]struct{}{},
		dirtyIDs:      map[string]struct{}{},
		svc:           newServiceInputs(),
		cost:          map[objKey]policyCost{},
		nsCost:        map[string]policyCost{},
		nsBudget:      map[string]string{},
	}}
}

// SetLimits bounds what each namespace's policies, and all namespaces'
// policies and Services, may ask of the node (see Snapshot.Limits).
func (c *Incremental) SetLimits(l Limits) {
	if c.in.limits == l {
		return
	}
	c.in.limits = l
	c.in.costChanged = true
	c.st = nil // every policy's budget may change: rebuild
}

// SetNode names this node's Node (Snapshot.Node); a change recomputes
// every Service.
func (c *Incremental) SetNode(name string) {
	if c.in.svc.at.Name == name {
		return
	}
	c.in.svc.at.Name = name
	c.in.svc.markAllDirty()
}

// SetNodeInfo sets this node's zone and addresses (Snapshot.Zone and
// Snapshot.NodeAddrs); a change recomputes every Service.
func (c *Incremental) SetNodeInfo(zone string, addrs []netip.Addr) {
	if c.in.svc.at.Zone == zone && slices.Equal(c.in.svc.at.Addrs, addrs) {
		return
	}
	c.in.svc.at.Zone, c.in.svc.at.Addrs = zone, slices.Clone(addrs)
	c.in.svc.markAllDirty()
}

// SetNamespace adds ns, or replaces the namespace of its name.
func (c *Incremental) SetNamespace(ns *policyapi.Namespace) {
	if c.in.namespaces[ns.Name] == ns {
		return
	}
	c.in.namespaces[ns.Name] = ns
	c.in.dirtyNS[ns.Name] = struct{}{}
}

// DeleteNamespace removes the namespace object name; its pods and policies
// stay (see Snapshot.Namespaces).
func (c *Incremental) DeleteNamespace(name string) {
	if _, ok := c.in.namespaces[name]; !ok {
		return
	}
	delete(c.in.namespaces, name)
	c.in.dirtyNS[name] = struct{}{}
}

// SetPod adds p, or replaces the pod of its namespace and name. As in
// Snapshot.Pods, a local pod's addresses are those of its CNI allocation.
func (c *Incremental) SetPod(p *policyapi.Pod) {
	k := objKey{p.Namespace, p.Name}
	if c.in.pods[k] == p {
		return
	}
	c.in.pods[k] = p
	c.in.dirtyPods[objKey{policyapi.PodNamespace(p), p.Name}] = struct{}{}
}

// DeletePod removes the pod namespace/name.
func (c *Incremental) DeletePod(namespace, name string) {
	k := objKey{namespace, name}
	p, ok := c.in.pods[k]
	if !ok {
		return
	}
	delete(c.in.pods, k)
	c.in.dirtyPods[objKey{policyapi.PodNamespace(p), p.Name}] = struct{}{}
}

// SetPolicy adds np, or replaces the policy of its namespace and name.
func (c *Incremental) SetPolicy(np *policyapi.NetworkPolicy) {
	k := objKey{np.Namespace, np.Name}
	if c.in.policies[k] == np {
		return
	}
	c.in.policies[k] = np
	c.in.dirtyPolicies[k] = struct{}{}
	c.in.setCost(k, np)
}

// DeletePolicy removes the policy namespace/name.
func (c *Incremental) DeletePolicy(namespace, name string) {
	k := objKey{namespace, name}
	if _, ok := c.in.policies[k]; !ok {
		return
	}
	delete(c.in.policies, k)
	c.in.dirtyPolicies[k] = struct{}{}
	c.in.setCost(k, nil)
}

// setCost accounts for the policy of key k becoming np (nil: deleted).
func (in *inputs) setCost(k objKey, np *policyapi.NetworkPolicy) {
	in.costChanged = true
	if old, ok := in.cost[k]; ok {
		ns := policyapi.NamespaceOrDefault(k.ns)
		if in.nsCost[ns] = in.nsCost[ns].sub(old); in.nsCost[ns] == (policyCost{}) {
			delete(in.nsCost, ns)
		}
		delete(in.cost, k)
	}
	if np == nil {
		return
	}
	_, err := policyapi.ParsePolicy(np)
	c := costOf(np, err == nil)
	in.cost[k] = c
	ns := policyNamespace(np)
	in.nsCost[ns] = in.nsCost[ns].add(c)
}

// updateBudget finds the namespaces over budget and marks the policies
// of those that went over or came back dirty.
func (in *inputs) updateBudget() {
	if !in.costChanged {
		return
	}
	in.costChanged = false
	budget := in.limits.overBudget(in.nsCost)
	var flipped map[string]bool
	for ns, why := range budget {
		if in.nsBudget[ns] != why {
			mak(&flipped)[ns] = true
		}
	}
	for ns := range in.nsBudget {
		if _, ok := budget[ns]; !ok {
			mak(&flipped)[ns] = true
		}
	}
	in.nsBudget = budget
	if len(flipped) == 0 {
		return
	}
	for k, np := range in.policies {
		if flipped[policyNamespace(np)] {
			in.dirtyPolicies[k] = struct{}{}
		}
	}
}

// mak returns *m, making it first if it is nil.
func mak[K comparable, V any](m *map[K]V) map[K]V {
	if *m == nil {
		*m = map[K]V{}
	}
	return *m
}

// SetIdentity assigns id to the identity key (see Snapshot.Identities).
func (c *Incremental) SetIdentity(key string, id policyapi.Peer) {
	if old, ok := c.in.identities[key]; ok && old == id {
		return
	}
	c.in.identities[key] = id
	c.in.dirtyIDs[key] = struct{}{}
}

// DeleteIdentity removes the identity key.
func (c *Incremental) DeleteIdentity(key string) {
	if _, ok := c.in.identities[key]; !ok {
		return
	}
	delete(c.in.identities, key)
	c.in.dirtyIDs[key] = struct{}{}
}

// SetLocal replaces the local endpoints (see Snapshot.Local). The order
// matters as it does there; local is copied.
func (c *Incremental) SetLocal(local []LocalEndpoint) {
	if slices.Equal(c.in.local, local) {
		return
	}
	c.in.local = slices.Clone(local)
	c.in.dirtyLocal = true
}

// Compile returns the desired state of the objects as they are now. The
// result shares every map and *EndpointPolicy that did not change with the
// previous result.
func (c *Incremental) Compile() (*Desired, error) {
	st := c.st
	if st == nil {
		st = newState(c.last, len(c.in.pods))
		c.in.markAllDirty()
	}
	c.in.updateBudget()
	d, err := st.update(&c.in)
	c.in.clearDirty()
	if err != nil {
		c.st = nil
		return nil, err
	}
	c.st, c.last = st, d
	return d, nil
}

func (in *inputs) markAllDirty() {
	for name := range in.namespaces {
		in.dirtyNS[name] = struct{}{}
	}
	if len(in.dirtyPods) == 0 {
		in.dirtyPods = make(map[objKey]struct{}, len(in.pods))
	}
	for _, p := range in.pods {
		in.dirtyPods[objKey{policyapi.PodNamespace(p), p.Name}] = struct{}{}
	}
	for k := range in.policies {
		in.dirtyPolicies[k] = struct{}{}
	}
	in.dirtyLocal = true
	in.svc.markAllDirty()
}

func (in *inputs) clearDirty() {
	reset(&in.dirtyNS)
	reset(&in.dirtyPods)
	reset(&in.dirtyPolicies)
	reset(&in.dirtyIDs)
	reset(&in.svc.dirty)
	in.dirtyLocal = false
}

// reset empties a work set; one that grew large (a rebuild) is replaced
// rather than cleared, which would keep its memory.
func reset[K comparable](m *map[K]struct{}) {
	if len(*m) > 1024 {
		*m = map[K]struct{}{}
		return
	}
	clear(*m)
}

// state is what the compiler derived from its inputs: the previous
// compilation's intermediate results, kept so the next one can reuse them.
type state struct {
	// Policies by the key they were given under and by their namespace,
	// and the ipBlocks of all of them (key -> references).
	policies   map[objKey]*policyState
	nsPolicies map[string]map[*policyState]struct{}
	// failed is the reason of every failed policy, by namespace/name.
	failed        map[string]string
	failedChanged bool
	blocks        map[string]int
	blockByKey    map[string]*policyapi.CIDRBlock
	classes       *cidrClasses

	// Selector peers of the rules in use (those of policies selecting a
	// local endpoint), by canonical key, by the namespace a podSelector-only
	// peer picks from, and the peers with a namespaceSelector. allNamed and
	// blockNamed are the rules in use whose egress named ports depend on
	// every identity, or on the identities inside their ipBlocks.
	peers       map[string]*selPeer
	scopedPeers map[string]map[*selPeer]struct{}
	globalPeers map[*selPeer]struct{}
	allNamed    map[*ruleState]struct{}
	blockNamed  map[*ruleState]struct{}

	// Pods by namespace and name and by namespace; each namespace's
	// identity key prefix and labels; identities by key, by number and
	// (once announced to the selectors) by namespace; address claims.
	pods     map[objKey]*podState
	nsPods   map[string]map[*podState]struct{}
	nsKeys   map[string][]byte
	nsLabels map[string]map[string]string
	idents   map[string]*identState
	byID     map[policyapi.Peer]*identState
	nsIdents map[string]map[*identState]struct{}
	addrs    map[netip.Addr]*addrState

	// Local endpoints: the list as last applied, the endpoint each pod key
	// takes its addresses from, endpoints by host interface, by the pod
	// key they name and by their pod's namespace.
	local      []LocalEndpoint
	localByPod map[string]*LocalEndpoint
	eps        map[string]*endpointState
	epsByPod   map[string]map[*endpointState]struct{}
	epsByNS    map[string]map[*endpointState]struct{}

	// Work of the compilation in progress.
	dirtyEPs       map[*endpointState]struct{}
	pendingIdents  map[*identState]struct{} // created or lost their last pod
	classChanged   map[*identState]struct{} // the set of classes of their addresses changed
	touchedPols    map[*policyState]struct{}
	dirtyAddrs     map[netip.Addr]struct{}
	epsChanged     bool
	classesChanged bool
	rb             ruleBuilder // scratch of the endpoint being computed
	// inheriting are the policies set in this compilation that replace
	// an active one (see policyState.prev).
	inheriting []*policyState

	// seq numbers the versions of rule inputs; identVer is the version of
	// the set of identities and of their addresses' classes (see
	// ruleCache).
	seq, identVer uint64
	// ruleHits and ruleMisses count the rules a full recompute took
	// from their cache and those it resolved (tests).
	ruleHits, ruleMisses int

	// svc is the Services' part (see incremental_services.go).
	svc serviceState

	// out is the last result; prev, the result of the state this one
	// replaced (a rebuild reuses its unchanged parts).
	out, prev *Desired
}

// newState returns an empty state, its maps sized for pods pods.
func newState(prev *Desired, pods int) *state {
	return &state{
		policies:      map[objKey]*policyState{},
		failed:        map[string]string{},
		nsPolicies:    map[string]map[*policyState]struct{}{},
		blocks:        map[string]int{},
		blockByKey:    map[string]*policyapi.CIDRBlock{},
		classes:       newCIDRClasses(nil),
		peers:         map[string]*selPeer{},
		scopedPeers:   map[string]map[*selPeer]struct{}{},
		globalPeers:   map[*selPeer]struct{}{},
		allNamed:      map[*ruleState]struct{}{},
		blockNamed:    map[*ruleState]struct{}{},
		pods:          make(map[objKey]*podState, pods),
		nsPods:        map[string]map[*podState]struct{}{},
		nsKeys:        map[string][]byte{},
		nsLabels:      map[string]map[string]string{},
		idents:        map[string]*identState{},
		byID:          map[policyapi.Peer]*identState{},
		nsIdents:      map[string]map[*identState]struct{}{},
		addrs:         make(map[netip.Addr]*addrState, pods),
		localByPod:    map[string]*LocalEndpoint{},
		eps:           map[string]*endpointState{},
		epsByPod:      map[string]map[*endpointState]struct{}{},
		epsByNS:       map[string]map[*endpointState]struct{}{},
		dirtyEPs:      map[*endpointState]struct{}{},
		pendingIdents: map[*identState]struct{}{},
		classChanged:  map[*identState]struct{}{},
		touchedPols:   map[*policyState]struct{}{},
		dirtyAddrs:    make(map[netip.Addr]struct{}, pods),
		svc:           newServiceState(),
		prev:          prev,
	}
}

// update brings the state up to date with the changed inputs and returns
// the new result. The order follows the dependencies: policies (and the
// CIDR classes of their ipBlocks), then what changes pods' identities or
// addresses, then the pods, then the identities' effect on selectors, then
// the endpoints' rules, and last the Services, which depend on nothing
// else.
func (st *state) update(in *inputs) (*Desired, error) {
	blockSeen := map[string]bool{} // ipBlock key -> in use before
	for _, k := range sortedKeys(in.dirtyPolicies, compareObjKey) {
		var budget string
		if np := in.policies[k]; np != nil {
			budget = in.nsBudget[policyNamespace(np)]
		}
		st.setPolicy(k, in.policies[k], budget, blockSeen)
	}
	for key, was := range blockSeen {
		if was != (st.blocks[key] > 0) {
			st.rebuildClasses()
			break
		}
	}
	for _, name := range sortedKeys(in.dirtyNS, strings.Compare) {
		st.namespaceChanged(name, in)
	}
	if in.dirtyLocal {
		if err := st.setLocal(in); err != nil {
			return nil, err
		}
	}
	for k := range in.dirtyPods {
		st.detachPod(k)
	}
	for key := range in.dirtyIDs {
		st.identityChanged(key, in)
	}
	for _, k := range sortedKeys(in.dirtyPods, compareObjKey) {
		if err := st.attachPod(k, in); err != nil {
			return nil, err
		}
	}
	if st.classesChanged {
		st.reclassAddrs()
	}
	st.settleIdentities()
	st.updateEndpoints()
	if err := st.updateServices(&in.svc, in.limits); err != nil {
		return nil, err
	}
	return st.publish(), nil
}

// publish assembles the result, sharing what did not change with the last
// one (or, after a rebuild, with the result of the state it replaced).
func (st *state) publish() *Desired {
	d := &Desired{CIDRs: st.classes.lpm}
	d.Services, d.ServicesBase, d.ServicesChanged = st.publishServices(st.out == nil)
	if st.out != nil {
		d.Addrs, d.Endpoints, d.FailedPolicies = st.out.Addrs, st.out.Endpoints, st.out.FailedPolicies
	}
	if st.out == nil || st.failedChanged {
		d.FailedPolicies = maps.Clone(st.failed)
		st.failedChanged = false
	}
	if st.out != nil {
		d.ServicesOverCapacity = st.out.ServicesOverCapacity
	}
	if st.out == nil || st.svc.overChanged {
		d.ServicesOverCapacity = maps.Clone(st.svc.over)
		st.svc.overChanged = false
	}
	if st.out == nil || len(st.dirtyAddrs) > 0 {
		var m map[netip.Addr]AddrEntry
		if st.out == nil {
			m = make(map[netip.Addr]AddrEntry, len(st.addrs))
		} else {
			m = maps.Clone(st.out.Addrs)
		}
		for a := range st.dirtyAddrs {
			if as := st.addrs[a]; as != nil && as.owner != nil {
				m[a] = AddrEntry{Identity: as.owner.id, CIDRClass: as.class}
			} else {
				delete(m, a)
			}
		}
		d.Addrs = m
		reset(&st.dirtyAddrs)
	}
	if st.out == nil || st.epsChanged {
		d.Endpoints = make(map[string]*EndpointPolicy, len(st.eps))
		for name, e := range st.eps {
			d.Endpoints[name] = e.out
		}
		st.epsChanged = false
	}
	if st.out == nil && st.prev != nil {
		// A rebuild: keep the previous maps where they are equal, so that
		// a backend comparing by pointer sees nothing changed.
		if maps.Equal(d.Addrs, st.prev.Addrs) {
			d.Addrs = st.prev.Addrs
		}
		if maps.Equal(d.CIDRs, st.prev.CIDRs) {
			d.CIDRs = st.prev.CIDRs
			st.classes.lpm = st.prev.CIDRs
		}
		if maps.Equal(d.Endpoints, st.prev.Endpoints) {
			d.Endpoints = st.prev.Endpoints
		}
		if maps.Equal(d.FailedPolicies, st.prev.FailedPolicies) && st.prev.FailedPolicies != nil {
			d.FailedPolicies = st.prev.FailedPolicies
		}
		if maps.Equal(d.ServicesOverCapacity, st.prev.ServicesOverCapacity) && st.prev.ServicesOverCapacity != nil {
			d.ServicesOverCapacity = st.prev.ServicesOverCapacity
		}
		st.prev = nil
	}
	st.out = d
	return d
}

// sortedKeys returns the keys of m in order, so that a compilation (and
// the error it reports first) does not depend on map order.
func sortedKeys[K comparable](m map[K]struct{}, cmp func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	return keys
}

func compareObjKey(a, b objKey) int {
	if c := strings.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// errDuplicatePod is the error Compile reports for two pods of one key.
func errDuplicatePod(pk string) error { return fmt.Errorf("pod %s listed twice", pk) }
