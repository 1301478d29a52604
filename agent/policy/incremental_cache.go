package policy

import (
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ruleCache keeps the entries addRule gave for a rule, so that a full
// recompute of an endpoint copies the entries of every rule whose inputs
// did not change instead of resolving its peers and named ports again. A
// policy edit that changes one rule then resolves that rule alone: the
// rules it kept inherit their caches from the policy it replaces.
//
// An entry records the versions of what addRule read: the member set of
// each selector peer, the CIDR class table, the set of identities and
// their classes (for egress named ports resolved against every identity
// or those inside ipBlocks), and the endpoint's own named ports (for
// ingress named ports). Versions come from one counter (state.seq), so a
// selector peer created anew never matches an entry of the one it
// replaced.
type ruleCache struct {
	entries []ruleContribution
}

// ruleContribution is what addRule gave for one rule, and the versions
// of its inputs then.
type ruleContribution struct {
	local    []policyapi.NamedPort // the endpoint's named ports, when the rule reads them
	peerVers []uint64              // by the rule's selector peers
	classes  *cidrClasses
	identVer uint64
	ents     []ruleEnt
}

// maxRuleContributions bounds a rule's cache entries: one per distinct
// set of local named ports among the endpoints the rule applies to, most
// recent first.
const maxRuleContributions = 4

// next returns a version no input has had before.
func (st *state) next() uint64 {
	st.seq++
	return st.seq
}

// identsChanged records that the set of identities, or the classes of an
// identity's addresses, changed.
func (st *state) identsChanged() { st.identVer = st.next() }

// readsLocal reports whether the rule's entries depend on the endpoint's
// own named ports: an ingress rule with a named port.
func (r *ruleState) readsLocal() bool {
	if r.dir != policyapi.Ingress {
		return false
	}
	for _, spec := range r.r.Ports {
		if spec.Name != "" {
			return true
		}
	}
	return false
}

// readsIdents reports whether the rule's entries depend on every
// identity, or on which identities lie inside its ipBlocks: an egress
// rule with a named port and no peers, or with ipBlock peers.
func (r *ruleState) readsIdents() bool {
	return r.named && (r.all() || len(r.blocks) > 0)
}

// current reports whether c was computed from the inputs the rule would
// read now, at an endpoint whose named ports are local.
func (st *state) current(r *ruleState, c *ruleContribution, local []policyapi.NamedPort) bool {
	if len(c.peerVers) != len(r.peers) {
		return false
	}
	for i, s := range r.peers {
		if s.ver != c.peerVers[i] {
			return false
		}
	}
	switch {
	case len(r.blocks) > 0 && c.classes != st.classes:
		return false
	case r.readsIdents() && c.identVer != st.identVer:
		return false
	case r.readsLocal() && !slices.Equal(c.local, local):
		return false
	}
	return true
}

// addRuleCached adds to b what addRule adds for rule r at an endpoint
// whose named ports are local, from r's cache when it is current.
func (st *state) addRuleCached(b *ruleBuilder, r *ruleState, local []policyapi.NamedPort) {
	if r.cache == nil {
		r.cache = &ruleCache{}
	}
	rc := r.cache
	for i := range rc.entries {
		if c := &rc.entries[i]; st.current(r, c, local) {
			b.addEnts(c.ents)
			st.ruleHits++
			return
		}
	}
	st.ruleMisses++
	start := len(b.ents)
	st.addRule(b, r, local)
	c := ruleContribution{
		peerVers: make([]uint64, len(r.peers)),
		classes:  st.classes,
		identVer: st.identVer,
		ents:     slices.Clone(b.ents[start:]),
	}
	for i, s := range r.peers {
		c.peerVers[i] = s.ver
	}
	if r.readsLocal() {
		c.local = local
	}
	// Entries computed for other named ports stay; stale ones go first.
	keep := rc.entries[:0]
	for _, old := range rc.entries {
		if r.readsLocal() && !slices.Equal(old.local, local) && st.current(r, &old, old.local) {
			keep = append(keep, old)
		}
	}
	if len(keep) >= maxRuleContributions {
		keep = keep[:maxRuleContributions-1]
	}
	rc.entries = append([]ruleContribution{c}, keep...)
}

// inheritCache gives each rule of ps the cache of the rule at the same
// place in prev, the policy ps replaces, when the two rules are equal.
func inheritCache(ps, prev *policyState) {
	for d := range ps.rules {
		for i, r := range ps.rules[d] {
			if i < len(prev.rules[d]) && prev.rules[d][i].r.Equal(r.r) {
				r.cache = prev.rules[d][i].cache
			}
		}
	}
}
