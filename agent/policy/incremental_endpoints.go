package policy

import (
	"maps"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// endpointState is one local endpoint and its compiled policy. A
// compilation recomputes it whole when what selects it may have changed
// (full), or only the entries of the identities in peers.
type endpointState struct {
	le     LocalEndpoint
	podKey string // le.Namespace/le.PodName
	// ns is the namespace of its pod as of the last full recompute, ""
	// when it had none.
	ns    string
	sel   [2][]*policyState     // the policies selecting it, by direction
	local []policyapi.NamedPort // its pod's named ports
	out   *EndpointPolicy
	full  bool
	peers map[policyapi.Peer]struct{}
	// patches counts the full recomputes in a row whose rules patched a
	// copy of the previous ones (see ruleBuilder.rebuild).
	patches int
}

func (st *state) markFull(e *endpointState) {
	e.full, e.peers = true, nil
	st.dirtyEPs[e] = struct{}{}
}

func (st *state) markPeer(e *endpointState, id policyapi.Peer) {
	if e.full {
		return
	}
	if e.peers == nil {
		e.peers = map[policyapi.Peer]struct{}{}
	}
	e.peers[id] = struct{}{}
	st.dirtyEPs[e] = struct{}{}
}

// podOf returns the pod e names, nil when there is none: Compile looks
// pods up by "namespace/name", so a namespace "" never matches.
func (st *state) podOf(e *endpointState) *policyapi.Pod {
	if e.le.Namespace == "" {
		return nil
	}
	if ps := st.pods[objKey{e.le.Namespace, e.le.PodName}]; ps != nil {
		return ps.pod
	}
	return nil
}

// removeEndpoint forgets a local endpoint that is gone.
func (st *state) removeEndpoint(name string, e *endpointState) {
	st.unselect(e)
	setDelete(st.epsByPod, e.podKey, e)
	setDelete(st.epsByNS, e.ns, e)
	delete(st.eps, name)
	delete(st.dirtyEPs, e)
	st.epsChanged = true
}

// unselect removes e from the policies selecting it.
func (st *state) unselect(e *endpointState) {
	for d := range e.sel {
		for _, ps := range e.sel[d] {
			delete(ps.selected, e)
			st.touchedPols[ps] = struct{}{}
		}
		e.sel[d] = nil
	}
}

// reselect finds the policies selecting e's pod, as compiler.endpoint does.
func (st *state) reselect(e *endpointState) {
	st.unselect(e)
	setDelete(st.epsByNS, e.ns, e)
	e.ns, e.local = "", nil
	pod := st.podOf(e)
	if pod == nil {
		return // unknown pod: not isolated, see Compile
	}
	e.ns = policyapi.PodNamespace(pod)
	setAdd(st.epsByNS, e.ns, e)
	e.local = policyapi.NamedPorts(pod)
	for ps := range st.nsPolicies[e.ns] {
		if !ps.cp.PodSelector.Matches(pod.Labels) {
			continue
		}
		if ps.selected == nil {
			ps.selected = map[*endpointState]struct{}{}
		}
		ps.selected[e] = struct{}{}
		st.touchedPols[ps] = struct{}{}
		for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
			if ps.cp.Applies[d] {
				e.sel[d] = append(e.sel[d], ps)
			}
		}
	}
}

// updateEndpoints recomputes the dirty endpoints. Policies that came into
// use are activated before any rule is computed; those that went out of
// use are deactivated after, so that a selector peer an edited policy
// keeps is never dropped and recomputed.
func (st *state) updateEndpoints() {
	dirty := make([]*endpointState, 0, len(st.dirtyEPs))
	for e := range st.dirtyEPs {
		dirty = append(dirty, e)
	}
	slices.SortFunc(dirty, func(a, b *endpointState) int { return strings.Compare(a.le.HostIfName, b.le.HostIfName) })
	for _, e := range dirty {
		if e.full {
			st.reselect(e)
		}
	}
	for ps := range st.touchedPols {
		if !ps.dead && !ps.active && len(ps.selected) > 0 {
			st.activate(ps)
		}
	}
	// A replacement that was not activated (it selects no endpoint)
	// inherits nothing: let the policy it replaced go.
	for _, ps := range st.inheriting {
		ps.prev = nil
	}
	st.inheriting = st.inheriting[:0]
	for _, e := range dirty {
		if e.full {
			st.computeFull(e)
		} else {
			st.computePeers(e)
		}
		e.full, e.peers = false, nil
	}
	reset(&st.dirtyEPs)
	for ps := range st.touchedPols {
		if ps.active && (ps.dead || len(ps.selected) == 0) {
			st.deactivate(ps)
		}
	}
	reset(&st.touchedPols)
}

// computeFull recomputes every rule of e. A direction a failed policy
// selects e for, or whose rules need too many port ranges, has no rule
// (see EndpointPolicy.Failed).
func (st *state) computeFull(e *endpointState) {
	var failed [2]string
	for d := range e.sel {
		if failed[d] = e.failedReasons(policyapi.Direction(d)); failed[d] != "" {
			continue
		}
		for _, ps := range e.sel[d] {
			for _, r := range ps.rules[d] {
				st.rb.setOrigin(r.origin)
				st.addRuleCached(&st.rb, r, e.local)
			}
		}
	}
	var old map[RuleKey][]PortRange
	var oldOrigins map[RuleKey]*RuleOrigin
	if e.out != nil {
		old, oldOrigins = e.out.Rules, e.out.Origins
	}
	rules, origins, changed := st.rb.rebuild(old, oldOrigins, &e.patches)
	for d, o := range st.rb.over {
		if o.n > 0 {
			failed[d] = e.tooMany(o)
		}
	}
	ep := &EndpointPolicy{
		IPv4: e.le.IPv4.Unmap(), IPv6: e.le.IPv6,
		IngressIsolated: len(e.sel[policyapi.Ingress]) > 0, EgressIsolated: len(e.sel[policyapi.Egress]) > 0,
		Rules: rules, Failed: failed, FailedPolicies: e.failedPolicies(), Isolators: e.isolators(),
		Origins: origins,
	}
	// Rules that did not change are e.out's very map (and a first
	// computation always changes them): only the rest needs comparing.
	if changed || !sameAddrsAndIsolation(e.out, ep) {
		e.out = ep
		st.epsChanged = true
	}
}

// computePeers recomputes the entries of e keyed by the identities in
// e.peers; e's policy is replaced (copied) only if one of them changed.
// An endpoint with a failed direction, before or after, is recomputed
// whole.
func (st *state) computePeers(e *endpointState) {
	if e.out.Failed != [2]string{} {
		st.computeFull(e)
		return
	}
	for id := range e.peers {
		x := st.byID[id]
		if x == nil {
			continue // gone: its entries are removed below
		}
		for d := range e.sel {
			for _, ps := range e.sel[d] {
				for _, r := range ps.rules[d] {
					st.rb.setOrigin(r.origin)
					st.addPeerRule(&st.rb, r, x, e.local)
				}
			}
		}
	}
	fresh := st.rb.build()
	if st.rb.over != [2]overKey{} {
		st.computeFull(e)
		return
	}
	old, oldOrigins := e.out.Rules, e.out.Origins
	rulesChanged, originsChanged := false, false
	e.eachPeerKey(func(k RuleKey) {
		a, inOld := old[k]
		b, inNew := fresh[k]
		rulesChanged = rulesChanged || inOld != inNew || !slices.Equal(a, b)
		originsChanged = originsChanged || !SameOrigin(oldOrigins[k], st.rb.originOf(k))
	})
	if !rulesChanged && !originsChanged {
		return
	}
	// The rules are copied even when only origins changed: a key whose
	// origin changed gets new ranges, fresh's (see Desired). The origins
	// are copied only when they changed; else they are e.out's, shared.
	ep := *e.out
	ep.Rules = maps.Clone(old)
	e.eachPeerKey(func(k RuleKey) {
		if rs, ok := fresh[k]; ok {
			ep.Rules[k] = rs
		} else {
			delete(ep.Rules, k)
		}
	})
	if originsChanged {
		ep.Origins = maps.Clone(oldOrigins)
		e.eachPeerKey(func(k RuleKey) {
			if o := st.rb.originOf(k); o != nil {
				ep.Origins[k] = o
			} else {
				delete(ep.Origins, k)
			}
		})
	}
	e.out = &ep
	st.epsChanged = true
}

// failedReasons joins the reasons of the failed policies selecting e for
// d, as compiler.endpoint does.
func (e *endpointState) failedReasons(d policyapi.Direction) string {
	cps := make([]*policyapi.ParsedPolicy, 0, len(e.sel[d]))
	for _, ps := range e.sel[d] {
		cps = append(cps, ps.cp)
	}
	return failedReasons(cps)
}

// isolators names the policies selecting e, by direction, as
// compiler.endpoint does.
func (e *endpointState) isolators() [2][]string {
	var cps [2][]*policyapi.ParsedPolicy
	for d := range e.sel {
		for _, ps := range e.sel[d] {
			cps[d] = append(cps[d], ps.cp)
		}
	}
	return isolatorNames(cps)
}

// failedPolicies names the failed policies selecting e, as
// compiler.endpoint does (see EndpointPolicy.FailedPolicies).
func (e *endpointState) failedPolicies() []string {
	var cps [2][]*policyapi.ParsedPolicy
	for d := range e.sel {
		for _, ps := range e.sel[d] {
			cps[d] = append(cps[d], ps.cp)
		}
	}
	return failedNames(cps)
}

// tooMany is the reason a direction of e fails whose key o.k needs o.n
// port ranges.
func (e *endpointState) tooMany(o overKey) string {
	var names []string
	for _, ps := range e.sel[o.k.Dir] {
		names = append(names, ps.cp.Name)
	}
	return tooManyReason(o.k, o.n, names)
}

// eachPeerKey calls fn with every rule key an identity of e.peers can have.
func (e *endpointState) eachPeerKey(fn func(RuleKey)) {
	for id := range e.peers {
		for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
			for _, proto := range allProtocols {
				fn(RuleKey{Peer: id, Dir: d, Proto: proto})
			}
		}
	}
}
