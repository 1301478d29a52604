package policy

import (
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// policyState is one compiled policy and the local endpoints it selects.
// While it selects any (active), its rules' selector peers are registered
// and kept up to date.
type policyState struct {
	key objKey
	cp  *policyapi.ParsedPolicy
	// rules are the rules of the directions the policy applies to, while
	// it is active.
	rules    [2][]*ruleState
	blocks   []*policyapi.CIDRBlock // every ipBlock peer, both directions
	selected map[*endpointState]struct{}
	active   bool
	dead     bool // replaced or deleted; deactivated once no endpoint uses it
	// prev is the active policy this one replaced, until this one is
	// activated: its rules' caches are inherited by the equal rules here.
	prev *policyState
}

// ruleState is one rule of a policy in a direction the policy applies to.
type ruleState struct {
	policy *policyState
	dir    policyapi.Direction
	r      *policyapi.ParsedRule
	blocks []*policyapi.CIDRBlock
	peers  []*selPeer  // the rule's selector peers, while the policy is active
	named  bool        // an egress rule with a named port
	cache  *ruleCache  // what addRule gave, shared with an equal rule it replaced
	origin *RuleOrigin // what its entries' origins say, shared by every endpoint's Origins
}

// all reports whether the rule has no peers: it allows every peer.
func (r *ruleState) all() bool { return len(r.r.Peers) == 0 }

// picks reports whether one of the rule's selector peers picks id.
func (r *ruleState) picks(id policyapi.Peer) bool {
	for _, s := range r.peers {
		if _, ok := s.members[id]; ok {
			return true
		}
	}
	return false
}

// selPeer is a selector peer in use and the identities it picks: those of
// namespace scope matching pod (no namespaceSelector), or those of the
// namespaces matching ns and, when set, pod. users counts the active rules
// referring to it.
type selPeer struct {
	scope   string
	pod, ns *policyapi.Selector
	key     string
	members map[policyapi.Peer]struct{}
	users   map[*ruleState]int
	ver     uint64 // changes with members (see ruleCache)
}

func (s *selPeer) matches(x *identState) bool {
	if s.ns == nil {
		if x.ns != s.scope {
			return false
		}
	} else if !s.ns.Matches(x.nsLabels) {
		return false
	}
	return s.pod == nil || s.pod.Matches(x.labels)
}

// selPeerKey is the canonical key of a selector peer of a policy in ns.
func selPeerKey(ns string, p policyapi.PolicyPeer) string {
	if p.Namespace == nil {
		return "pod\x00" + ns + "\x00" + p.Pod.Key()
	}
	key := "ns\x00" + p.Namespace.Key() + "\x00"
	if p.Pod != nil {
		key += "pod\x00" + p.Pod.Key()
	}
	return key
}

// setPolicy replaces the policy of key k with np (nil: deletes it);
// budget is why np's namespace is over its budget, "" when it is not. It
// records in blockSeen whether each ipBlock key it touches was in use
// before this compilation.
func (st *state) setPolicy(k objKey, np *policyapi.NetworkPolicy, budget string, blockSeen map[string]bool) {
	old := st.policies[k]
	if old != nil {
		st.dropPolicy(old, blockSeen)
		if old.cp.Failed != "" {
			delete(st.failed, old.cp.Name)
			st.failedChanged = true
		}
	}
	if np == nil {
		return
	}
	cp := compileOrFail(np, budget)
	if cp.Failed != "" {
		st.failed[cp.Name] = cp.Failed
		st.failedChanged = true
	}
	ps := &policyState{key: k, cp: cp}
	if old != nil && old.active {
		ps.prev = old
		st.inheriting = append(st.inheriting, ps)
	}
	for _, rules := range cp.Rules {
		for _, r := range rules {
			for _, peer := range r.Peers {
				if peer.Block != nil {
					ps.blocks = append(ps.blocks, peer.Block)
				}
			}
		}
	}
	for _, b := range ps.blocks {
		if _, ok := blockSeen[b.Key]; !ok {
			blockSeen[b.Key] = st.blocks[b.Key] > 0
		}
		st.blocks[b.Key]++
		st.blockByKey[b.Key] = b
	}
	st.policies[k] = ps
	setAdd(st.nsPolicies, cp.Namespace, ps)
	// The endpoints it selects now; those it selected before were marked
	// by dropPolicy.
	for e := range st.epsByNS[cp.Namespace] {
		if pod := st.podOf(e); pod != nil && cp.PodSelector.Matches(pod.Labels) {
			st.markFull(e)
		}
	}
}

// dropPolicy removes a policy that was replaced or deleted.
func (st *state) dropPolicy(ps *policyState, blockSeen map[string]bool) {
	delete(st.policies, ps.key)
	setDelete(st.nsPolicies, ps.cp.Namespace, ps)
	for _, b := range ps.blocks {
		if _, ok := blockSeen[b.Key]; !ok {
			blockSeen[b.Key] = true
		}
		if st.blocks[b.Key]--; st.blocks[b.Key] == 0 {
			delete(st.blocks, b.Key)
			delete(st.blockByKey, b.Key)
		}
	}
	for e := range ps.selected {
		st.markFull(e)
	}
	ps.dead = true
	st.touchedPols[ps] = struct{}{}
}

// rebuildClasses recomputes the CIDR classes from the ipBlocks in use.
// Class numbers may all change, so every endpoint is recomputed.
func (st *state) rebuildClasses() {
	blocks := make([]*policyapi.CIDRBlock, 0, len(st.blockByKey))
	for _, b := range st.blockByKey {
		blocks = append(blocks, b)
	}
	st.classes = newCIDRClasses(blocks)
	st.classesChanged = true
	for _, e := range st.eps {
		st.markFull(e)
	}
}

// activate registers the rules of a policy that came into use, and their
// selector peers.
func (st *state) activate(ps *policyState) {
	for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
		if !ps.cp.Applies[d] {
			continue
		}
		for i, cr := range ps.cp.Rules[d] {
			r := &ruleState{policy: ps, dir: d, r: cr}
			r.origin = ruleOrigin(ps.cp, d, i)
			for _, peer := range cr.Peers {
				if peer.Block != nil {
					r.blocks = append(r.blocks, peer.Block)
					continue
				}
				s := st.registerPeer(ps.cp.Namespace, peer)
				s.users[r]++
				r.peers = append(r.peers, s)
			}
			for _, spec := range cr.Ports {
				r.named = r.named || (d == policyapi.Egress && spec.Name != "")
			}
			if r.named && r.all() {
				st.allNamed[r] = struct{}{}
			}
			if r.named && len(r.blocks) > 0 {
				st.blockNamed[r] = struct{}{}
			}
			ps.rules[d] = append(ps.rules[d], r)
		}
	}
	ps.active = true
	if ps.prev != nil {
		inheritCache(ps, ps.prev)
		ps.prev = nil
	}
}

// deactivate releases what activate registered.
func (st *state) deactivate(ps *policyState) {
	for _, rules := range ps.rules {
		for _, r := range rules {
			for _, s := range r.peers {
				if s.users[r]--; s.users[r] == 0 {
					delete(s.users, r)
				}
				if len(s.users) == 0 {
					st.unregisterPeer(s)
				}
			}
			delete(st.allNamed, r)
			delete(st.blockNamed, r)
		}
	}
	ps.rules = [2][]*ruleState{}
	ps.active = false
}

// registerPeer returns the selector peer of a policy in ns, computing
// which identities it picks when it is new.
func (st *state) registerPeer(ns string, p policyapi.PolicyPeer) *selPeer {
	key := selPeerKey(ns, p)
	if s := st.peers[key]; s != nil {
		return s
	}
	s := &selPeer{pod: p.Pod, ns: p.Namespace, key: key, members: map[policyapi.Peer]struct{}{}, users: map[*ruleState]int{}}
	if p.Namespace == nil {
		s.scope = ns
		for x := range st.nsIdents[ns] {
			if s.matches(x) {
				s.members[x.id] = struct{}{}
			}
		}
		setAdd(st.scopedPeers, ns, s)
	} else {
		for _, x := range st.byID {
			if s.matches(x) {
				s.members[x.id] = struct{}{}
			}
		}
		st.globalPeers[s] = struct{}{}
	}
	s.ver = st.next()
	st.peers[key] = s
	return s
}

func (st *state) unregisterPeer(s *selPeer) {
	delete(st.peers, s.key)
	if s.ns == nil {
		setDelete(st.scopedPeers, s.scope, s)
	} else {
		delete(st.globalPeers, s)
	}
}

// markRule marks identity id dirty in every endpoint that uses rule r.
func (st *state) markRule(r *ruleState, id policyapi.Peer) {
	for e := range r.policy.selected {
		st.markPeer(e, id)
	}
}

// identInBlock reports whether x has addresses, all inside block b (see
// compiler.identsInBlock).
func (st *state) identInBlock(x *identState, b *policyapi.CIDRBlock) bool {
	if len(x.classes) == 0 {
		return false
	}
	for _, c := range x.classes {
		if !st.classes.inBlock(c.class, b) {
			return false
		}
	}
	return true
}

// addRule adds everything rule r gives an endpoint whose own named ports
// are local, as compiler.addRule does.
func (st *state) addRule(b *ruleBuilder, r *ruleState, local []policyapi.NamedPort) {
	d := r.dir
	// peers calls fn for PeerAny, or for every identity the selector peers
	// pick and every class of the ipBlocks (possibly more than once).
	peers := func(fn func(policyapi.Peer)) {
		if r.all() {
			fn(policyapi.PeerAny)
			return
		}
		for _, s := range r.peers {
			for id := range s.members {
				fn(id)
			}
		}
		for _, blk := range r.blocks {
			for _, class := range st.classes.classesOf(blk) {
				fn(class)
			}
		}
	}
	if len(r.r.Ports) == 0 {
		peers(func(p policyapi.Peer) {
			for _, proto := range allProtocols {
				b.add(RuleKey{Peer: p, Dir: d, Proto: proto}, allPorts)
			}
		})
		return
	}
	for _, spec := range r.r.Ports {
		switch {
		case spec.Name == "":
			pr := PortRange{spec.Lo, spec.Hi}
			peers(func(p policyapi.Peer) { b.add(RuleKey{Peer: p, Dir: d, Proto: spec.Proto}, pr) })
		case d == policyapi.Ingress:
			forNamedPort(local, spec.Name, spec.Proto, func(port uint16) {
				peers(func(p policyapi.Peer) { b.add(RuleKey{Peer: p, Dir: d, Proto: spec.Proto}, PortRange{port, port}) })
			})
		default:
			resolve := func(x *identState) {
				forNamedPort(x.ports, spec.Name, spec.Proto, func(port uint16) {
					b.add(RuleKey{Peer: x.id, Dir: d, Proto: spec.Proto}, PortRange{port, port})
				})
			}
			if r.all() {
				for _, x := range st.byID {
					resolve(x)
				}
				continue
			}
			for _, s := range r.peers {
				for id := range s.members {
					resolve(st.byID[id])
				}
			}
			for _, blk := range r.blocks {
				for _, x := range st.byID {
					if st.identInBlock(x, blk) {
						resolve(x)
					}
				}
			}
		}
	}
}

// addPeerRule adds what rule r gives an endpoint for identity x alone: the
// entries addRule adds keyed by x.id.
func (st *state) addPeerRule(b *ruleBuilder, r *ruleState, x *identState, local []policyapi.NamedPort) {
	d := r.dir
	add := func(proto uint8, pr PortRange) { b.add(RuleKey{Peer: x.id, Dir: d, Proto: proto}, pr) }
	picked := !r.all() && r.picks(x.id)
	if len(r.r.Ports) == 0 {
		if picked {
			for _, proto := range allProtocols {
				add(proto, allPorts)
			}
		}
		return
	}
	for _, spec := range r.r.Ports {
		switch {
		case spec.Name == "":
			if picked {
				add(spec.Proto, PortRange{spec.Lo, spec.Hi})
			}
		case d == policyapi.Ingress:
			if picked {
				forNamedPort(local, spec.Name, spec.Proto, func(port uint16) { add(spec.Proto, PortRange{port, port}) })
			}
		default:
			inScope := r.all() || picked
			for _, blk := range r.blocks {
				inScope = inScope || st.identInBlock(x, blk)
			}
			if inScope {
				forNamedPort(x.ports, spec.Name, spec.Proto, func(port uint16) { add(spec.Proto, PortRange{port, port}) })
			}
		}
	}
}

// sameAddrsAndIsolation reports whether a and b are equal but for their
// rules.
func sameAddrsAndIsolation(a, b *EndpointPolicy) bool {
	return a.IPv4 == b.IPv4 && a.IPv6 == b.IPv6 &&
		a.IngressIsolated == b.IngressIsolated && a.EgressIsolated == b.EgressIsolated && a.Failed == b.Failed &&
		slices.Equal(a.FailedPolicies, b.FailedPolicies) &&
		slices.Equal(a.Isolators[0], b.Isolators[0]) && slices.Equal(a.Isolators[1], b.Isolators[1])
}
