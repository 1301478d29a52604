package hns

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"lockstep.dev/lockstep/agent/policy"
)

// Dataplane enforces a policy.Desired through HNS SetPolicies and endpoint
// ACLs. It implements enforcer.Dataplane.
type Dataplane struct {
	c Client

	mu sync.Mutex
	// sets and acls are what HNS holds of lockstep's, as of the last call
	// that succeeded; known is false when that is in doubt (start-up, or
	// a call failed and may have taken effect in part), and the next Apply
	// reads HNS back first.
	sets  map[string]SetPolicy
	acls  map[string][]ACL
	known bool

	// betweenSetsAndACLs, when set, runs in Apply after the sets are
	// applied and before any endpoint's ACLs are: the window of seed 000.
	betweenSetsAndACLs func()
}

// New returns a Dataplane that drives c. It reads HNS's state on the first
// Apply, so lockstep objects left by a previous agent are adopted, and
// removed when the desired state lacks them.
func New(c Client) *Dataplane {
	return &Dataplane{c: c}
}

// Attach checks that the HNS endpoint named hostIf exists. There is nothing
// to attach: HNS enforces an endpoint's ACLs once Apply sets them, and
// until then the endpoint has none of lockstep's (it is not isolated, where
// the eBPF dataplane fails closed).
func (dp *Dataplane) Attach(hostIf string) error {
	if err := dp.c.Endpoint(hostIf); err != nil {
		return fmt.Errorf("attach to hns endpoint %s: %w", hostIf, err)
	}
	return nil
}

// Detach removes lockstep's ACLs from hostIf if an Apply left any (Apply
// already removes them from endpoints the desired state lacks). A missing
// endpoint is not an error. The sets the ACLs referenced are deleted by
// the next Apply.
func (dp *Dataplane) Detach(hostIf string) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if dp.known && len(dp.acls[hostIf]) == 0 {
		return nil
	}
	err := dp.c.SetEndpointACLs(hostIf, nil)
	if err != nil && !errors.Is(err, ErrEndpointNotFound) {
		dp.known = false
		return fmt.Errorf("detach from hns endpoint %s: %w", hostIf, err)
	}
	delete(dp.acls, hostIf)
	return nil
}

// Apply makes d the enforced state. It runs in the order that keeps every
// HNS request valid, and the one that prevents seed 000:
//
//  1. create the SetPolicies d needs and update the ones whose members
//     changed (IPSETs before the NESTEDIPSETs that contain them);
//  2. replace the ACLs of every endpoint whose ACLs changed, and remove
//     them from endpoints d lacks;
//  3. delete the SetPolicies d does not need and that no applied ACL or
//     remaining nested set references (nested sets first).
//
// A set is therefore deleted only after the update that removed its last
// reference has succeeded. Apply is incremental: it diffs d against what
// it last applied. After a failed call it trusts nothing it remembers and
// reads HNS back, so the next Apply repairs whatever the failure left; an
// Apply that finds nothing to change also reads HNS back, so the periodic
// resync repairs drift.
//
// HNS offers no transaction across requests: while Apply runs, packets may
// see new set members with old ACLs, or some endpoints' new ACLs before
// others'. Each endpoint's ACLs change in one request.
func (dp *Dataplane) Apply(d *policy.Desired) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	want, err := render(d)
	if err != nil {
		return fmt.Errorf("render hns policy: %w", err)
	}
	if !dp.known || dp.matches(want) {
		if err := dp.refresh(); err != nil {
			return err
		}
	}
	if err := dp.applySets(want.sets); err != nil {
		dp.known = false
		return err
	}
	if dp.betweenSetsAndACLs != nil {
		dp.betweenSetsAndACLs()
	}
	if err := dp.applyACLs(want.acls); err != nil {
		dp.known = false
		return err
	}
	if err := dp.deleteUnreferenced(want.sets); err != nil {
		dp.known = false
		return err
	}
	return nil
}

// matches reports whether the remembered state is want.
func (dp *Dataplane) matches(want *target) bool {
	return maps.EqualFunc(dp.sets, want.sets, equalSet) &&
		maps.EqualFunc(dp.acls, want.acls, func(a, b []ACL) bool { return slices.EqualFunc(a, b, equalACL) })
}

// refresh reads lockstep's state back from HNS.
func (dp *Dataplane) refresh() error {
	sets, err := dp.c.SetPolicies()
	if err != nil {
		return fmt.Errorf("list set policies: %w", err)
	}
	acls, err := dp.c.EndpointACLs()
	if err != nil {
		return fmt.Errorf("list endpoint acls: %w", err)
	}
	dp.sets = make(map[string]SetPolicy, len(sets))
	for _, s := range sets {
		dp.sets[s.ID] = s
	}
	dp.acls = make(map[string][]ACL, len(acls))
	for name, a := range acls {
		if len(a) > 0 {
			dp.acls[name] = a
		}
	}
	dp.known = true
	return nil
}

// applySets is step 1: create and update sets, IPSETs first.
func (dp *Dataplane) applySets(want map[string]SetPolicy) error {
	for _, typ := range []SetPolicyType{SetIPSet, SetNestedIPSet} {
		var add, update []SetPolicy
		for _, id := range sortedKeys(want) {
			s := want[id]
			if s.Type != typ {
				continue
			}
			have, ok := dp.sets[id]
			switch {
			case !ok:
				add = append(add, s)
			case !equalSet(have, s):
				update = append(update, s)
			}
		}
		if len(add) > 0 {
			if err := dp.c.AddSetPolicies(add); err != nil {
				return fmt.Errorf("add %d %s set policies: %w", len(add), typ, err)
			}
			for _, s := range add {
				dp.sets[s.ID] = s
			}
		}
		if len(update) > 0 {
			if err := dp.c.UpdateSetPolicies(update); err != nil {
				return fmt.Errorf("update %d %s set policies: %w", len(update), typ, err)
			}
			for _, s := range update {
				dp.sets[s.ID] = s
			}
		}
	}
	return nil
}

// applyACLs is step 2: replace every endpoint's ACLs that differ from want.
// An endpoint HNS no longer has holds no ACLs and is skipped: its pod is
// being deleted, and failing here would hold every other pod's policy back.
func (dp *Dataplane) applyACLs(want map[string][]ACL) error {
	names := sortedKeys(want)
	for name := range dp.acls {
		if _, ok := want[name]; !ok {
			names = append(names, name)
		}
	}
	for _, name := range names {
		acls := want[name]
		if slices.EqualFunc(dp.acls[name], acls, equalACL) {
			continue
		}
		err := dp.c.SetEndpointACLs(name, acls)
		switch {
		case errors.Is(err, ErrEndpointNotFound):
			delete(dp.acls, name)
		case err != nil:
			return fmt.Errorf("update acls of hns endpoint %s: %w", name, err)
		case len(acls) == 0:
			delete(dp.acls, name)
		default:
			dp.acls[name] = acls
		}
	}
	return nil
}

// deleteUnreferenced is step 3: delete the sets want lacks, unless an
// applied ACL or a nested set that stays references them. Nested sets go
// first, so their members are free by the time IPSETs are deleted.
func (dp *Dataplane) deleteUnreferenced(want map[string]SetPolicy) error {
	for _, typ := range []SetPolicyType{SetNestedIPSet, SetIPSet} {
		refs := dp.references()
		var del []SetPolicy
		for _, id := range sortedKeys(dp.sets) {
			if _, ok := want[id]; ok || dp.sets[id].Type != typ || refs[id] {
				continue
			}
			del = append(del, dp.sets[id])
		}
		if len(del) == 0 {
			continue
		}
		if err := dp.c.DeleteSetPolicies(del); err != nil {
			return fmt.Errorf("delete %d %s set policies: %w", len(del), typ, err)
		}
		for _, s := range del {
			delete(dp.sets, s.ID)
		}
	}
	return nil
}

// references returns the IDs of the sets that applied ACLs and nested sets
// reference.
func (dp *Dataplane) references() map[string]bool {
	refs := map[string]bool{}
	for _, acls := range dp.acls {
		for _, a := range acls {
			for _, id := range a.RemoteSets {
				refs[id] = true
			}
		}
	}
	for _, s := range dp.sets {
		if s.Type == SetNestedIPSet {
			for _, id := range s.Values {
				refs[id] = true
			}
		}
	}
	return refs
}

func equalSet(a, b SetPolicy) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Type == b.Type && slices.Equal(a.Values, b.Values)
}

func equalACL(a, b ACL) bool {
	return a.ID == b.ID && a.Direction == b.Direction && a.Action == b.Action &&
		a.Protocol == b.Protocol && a.Priority == b.Priority &&
		slices.Equal(a.LocalPorts, b.LocalPorts) && slices.Equal(a.RemotePorts, b.RemotePorts) &&
		slices.Equal(a.RemoteSets, b.RemoteSets)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
