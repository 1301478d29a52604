package enforcer

import (
	"slices"

	"lockstep.dev/lockstep/agent/policy"
)

// Failures is what the state applied last fails closed on: a policy that
// does not compile (or that lockstep could not convert), one whose
// namespace is over its budget, an endpoint whose rules do not fit. Each
// affects only the endpoints it selects, which get no allow in the
// directions concerned; everything else is enforced as written.
type Failures struct {
	// Policies maps each failed policy (namespace/name) of the cluster to
	// the reason: what status and metrics show.
	Policies map[string]string
	// Local is the part of Policies that selects an endpoint of this node
	// (see policy.EndpointPolicy.FailedPolicies): the policies this node
	// fails closed on, and so the only ones it posts Events about. Every
	// node compiles every policy; were each to report them all, K failed
	// policies on N nodes would post K times N Events. Nil when none.
	Local map[string]string
	// Endpoints lists the local endpoints with a direction that fails
	// closed, by host interface.
	Endpoints []EndpointFailure
	// Services maps each namespace whose Services lockstep does not
	// translate, over the node's Service capacity, to the reason
	// (policy.Desired.ServicesOverCapacity).
	Services map[string]string
}

// EndpointFailure is a local endpoint with no allow in a direction that
// policies isolate it for.
type EndpointFailure struct {
	HostIf string
	// Reasons says why, by policyapi.Direction ("" when the direction is
	// enforced as written).
	Reasons [2]string
}

// Empty reports whether nothing failed.
func (f Failures) Empty() bool {
	return len(f.Policies) == 0 && len(f.Endpoints) == 0 && len(f.Services) == 0
}

// OnFailures registers fn to hear the failures of every applied state
// that changes them; call it before the first Sync. fn runs with the apply
// lock held: it must not block.
func (e *Enforcer) OnFailures(fn func(Failures)) { e.onFailures = fn }

// Failures reports what the state applied last fails closed on, and the
// namespaces whose Services it does not translate; empty before the first
// apply. It does not wait for an apply in progress.
func (e *Enforcer) Failures() Failures {
	if f := e.failures.Load(); f != nil {
		return *f
	}
	return Failures{}
}

// noteFailures records the failures of d, the state just applied (or
// found equal to the one applied last). The failures noted last are still
// right when d shares their state's endpoints, failed policies and
// namespaces over the Service limits.
func (e *Enforcer) noteFailures(d *policy.Desired) {
	if last := e.failuresOf; last != nil && sameMap(d.Endpoints, last.Endpoints) && sameMap(d.FailedPolicies, last.FailedPolicies) &&
		sameMap(d.ServicesOverCapacity, last.ServicesOverCapacity) {
		return
	}
	e.failuresOf = d
	f := &Failures{Policies: d.FailedPolicies, Services: d.ServicesOverCapacity}
	for hostIf, ep := range d.Endpoints {
		if ep.Failed != [2]string{} {
			f.Endpoints = append(f.Endpoints, EndpointFailure{HostIf: hostIf, Reasons: ep.Failed})
		}
		for _, name := range ep.FailedPolicies {
			if why, ok := d.FailedPolicies[name]; ok {
				if f.Local == nil {
					f.Local = map[string]string{}
				}
				f.Local[name] = why
			}
		}
	}
	slices.SortFunc(f.Endpoints, func(a, b EndpointFailure) int {
		switch {
		case a.HostIf < b.HostIf:
			return -1
		case a.HostIf > b.HostIf:
			return 1
		}
		return 0
	})
	var before, servicesBefore map[string]string
	if prev := e.failures.Load(); prev != nil {
		before, servicesBefore = prev.Policies, prev.Services
	}
	for name, why := range f.Policies {
		if before[name] != why {
			e.log.Warn("network policy fails closed: the pods it selects get no allow in the directions it declares", "policy", name, "reason", why)
		}
	}
	for name := range before {
		if _, ok := f.Policies[name]; !ok {
			e.log.Info("network policy enforced again", "policy", name)
		}
	}
	// Once per namespace going over, not per change of its counts: a
	// tenant's churn must not flood the agent's log.
	for ns, why := range f.Services {
		if _, was := servicesBefore[ns]; !was {
			e.log.Warn("services not translated: the node's Service maps cannot hold them", "namespace", ns, "reason", why)
		}
	}
	for ns := range servicesBefore {
		if _, ok := f.Services[ns]; !ok {
			e.log.Info("services translated by lockstep again", "namespace", ns)
		}
	}
	e.failures.Store(f)
	if e.onFailures != nil {
		e.onFailures(*f)
	}
}
