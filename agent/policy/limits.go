package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Limits bound what the policies of one namespace, and the policies and
// Services of all namespaces together, may ask of a node. A node is shared
// by every tenant: without a bound, one namespace's policies or Services
// could fill a dataplane map and leave every other pod of the node without
// its policy. The zero Limits bounds nothing.
type Limits struct {
	// PrefixesPerNamespace bounds the ipBlock prefixes of all policies of
	// one namespace together: every cidr and every except counts one, in
	// every rule and policy that lists it. 0 is no bound.
	PrefixesPerNamespace int
	// RulesPerNamespace bounds the rule entries of all policies of one
	// namespace together: a rule counts its peers times its ports (an
	// empty list counting one). 0 is no bound.
	RulesPerNamespace int
	// Prefixes bounds the ipBlock prefixes of all namespaces together.
	// The eBPF dataplane's longest-prefix map holds the prefixes of the
	// state applied and of the one being applied (one map, a class per
	// parity), so the agent's bound is half its capacity less the two
	// default routes. Only prefixes the node would load count: not those
	// of a policy that does not compile, nor those of a namespace over its
	// own budget. When the namespaces within their own budgets still ask
	// for more, the largest are failed until the rest fit, and namespaces
	// of equal size fail together (see Limits.overBudget). 0 is no bound.
	Prefixes int
	// ServiceFrontends and ServiceBackends bound the Service frontends
	// the dataplanes translate, and their backends (counted once per
	// frontend), of all namespaces together: the eBPF dataplane's Service
	// maps hold that many per state (ServiceBackends also bounds each
	// frontend by MaxBackendsPerFrontend). When the Services ask for more,
	// the Services of the namespaces with the largest share are not
	// translated until the rest fit (see Limits.servicesOver). 0 is no
	// bound; a dataplane that holds Services in no map of its own needs
	// none.
	ServiceFrontends, ServiceBackends int
}

// CIDRCapacity is the number of entries of the eBPF dataplane's
// longest-prefix map of ipBlock prefixes (lockstep_cidrs); the agent's
// limits keep every compiled state within it.
const CIDRCapacity = 65536

// DefaultLimits are the agent's limits: a state may hold half of
// lockstep_cidrs but the two default routes (32766 prefixes: the map
// holds the applied state's and the next one's), and a namespace an
// eighth of that (4095), so that eight tenants at their budget still fit
// the node and no single one can fill it; a namespace may hold 4096 rule
// entries; the Services of all namespaces together may hold what the
// Service maps do.
var DefaultLimits = Limits{
	PrefixesPerNamespace: (CIDRCapacity/2 - 2) / 8,
	RulesPerNamespace:    CIDRCapacity / 16,
	Prefixes:             CIDRCapacity/2 - 2,
	ServiceFrontends:     ServiceFrontendCapacity,
	ServiceBackends:      ServiceBackendCapacity,
}

// policyCost is what a policy, or all policies of a namespace, asks of
// the node.
type policyCost struct {
	// prefixes and rules count the spec as written, valid or not: they
	// are what the namespace's own budget bounds.
	prefixes, rules int
	// loaded counts the prefixes the node would load: those of a policy
	// that compiles. A policy that does not compile fails closed with no
	// rule, so its prefixes take no room in the node's maps and must not
	// push another namespace out of them.
	loaded int
}

func (c policyCost) add(o policyCost) policyCost {
	return policyCost{c.prefixes + o.prefixes, c.rules + o.rules, c.loaded + o.loaded}
}

func (c policyCost) sub(o policyCost) policyCost {
	return policyCost{c.prefixes - o.prefixes, c.rules - o.rules, c.loaded - o.loaded}
}

// costOf counts np's prefixes and rule entries from its spec as written;
// valid says whether np compiles, and so whether its prefixes are loaded.
func costOf(np *policyapi.NetworkPolicy, valid bool) policyCost {
	var c policyCost
	rule := func(peers []policyapi.NetworkPolicyPeer, ports int) {
		c.rules += max(1, len(peers)) * max(1, ports)
		for _, p := range peers {
			if p.IPBlock != nil {
				c.prefixes += 1 + len(p.IPBlock.Except)
			}
		}
	}
	for _, r := range np.Spec.Ingress {
		rule(r.From, len(r.Ports))
	}
	for _, r := range np.Spec.Egress {
		rule(r.To, len(r.Ports))
	}
	if valid {
		c.loaded = c.prefixes
	}
	return c
}

// policyNamespace is the namespace a policy belongs to.
func policyNamespace(np *policyapi.NetworkPolicy) string {
	return policyapi.NamespaceOrDefault(np.Namespace)
}

// overBudget returns, for every namespace whose policies the limits do not
// allow, why. A namespace over its own budget fails. If the namespaces
// within theirs still ask the node to load more prefixes than it holds,
// the largest fail until the rest fit, and every namespace as large as
// the last one failed fails with it: among namespaces of equal size none
// is preferred, so no tenant can push another out by how it names its
// namespaces. The result depends on the costs alone, never on the names.
//
// This bounds what naming can do, not what numbers can: a tenant with
// many namespaces just smaller than another's can still make that one
// the largest, and so the first to fail. The per-namespace budget, and
// who may create namespaces, bound that.
func (l Limits) overBudget(costs map[string]policyCost) map[string]string {
	out := map[string]string{}
	var within []string
	total := 0
	for ns, c := range costs {
		switch {
		case l.PrefixesPerNamespace > 0 && c.prefixes > l.PrefixesPerNamespace:
			out[ns] = fmt.Sprintf("namespace %s is over its budget: its policies hold %d ipBlock prefixes, at most %d", ns, c.prefixes, l.PrefixesPerNamespace)
		case l.RulesPerNamespace > 0 && c.rules > l.RulesPerNamespace:
			out[ns] = fmt.Sprintf("namespace %s is over its budget: its policies hold %d rule entries (peers times ports), at most %d", ns, c.rules, l.RulesPerNamespace)
		default:
			within = append(within, ns)
			total += c.loaded
		}
	}
	if l.Prefixes <= 0 || total <= l.Prefixes {
		return out
	}
	slices.SortFunc(within, func(a, b string) int { return cmp.Compare(costs[b].loaded, costs[a].loaded) })
	cut := 0 // the size of the last namespace failed
	for _, ns := range within {
		n := costs[ns].loaded
		if total <= l.Prefixes && n != cut {
			break
		}
		total -= n
		cut = n
		out[ns] = fmt.Sprintf("the node's ipBlock prefixes are full (at most %d) and namespace %s holds %d of them, one of the largest shares (namespaces of equal share fail together)", l.Prefixes, ns, n)
	}
	return out
}

// compileOrFail compiles np; when np does not compile, or budget (the
// reason its namespace is over budget, "" if it is not) fails it, it
// returns the policy's fail-closed stand-in: the pods it selects, in the
// directions it declares, and no rule. Where the selector or the policy
// types are what does not compile, the stand-in selects every pod of the
// namespace, in both directions: what lockstep cannot read fails closed.
func compileOrFail(np *policyapi.NetworkPolicy, budget string) *policyapi.ParsedPolicy {
	cp, err := policyapi.ParsePolicy(np)
	return failClosed(np, cp, err, budget)
}

// failClosed is compileOrFail given what ParsePolicy returned for np.
func failClosed(np *policyapi.NetworkPolicy, cp *policyapi.ParsedPolicy, err error, budget string) *policyapi.ParsedPolicy {
	if err == nil && budget == "" {
		return cp
	}
	ns := policyNamespace(np)
	failed := &policyapi.ParsedPolicy{Name: ns + "/" + np.Name, Namespace: ns}
	if err != nil {
		failed.Failed = err.Error()
	} else {
		failed.Failed = fmt.Sprintf("networkpolicy %s: %s", failed.Name, budget)
	}
	if cp != nil {
		failed.PodSelector, failed.Applies = cp.PodSelector, cp.Applies
		return failed
	}
	if sel, err := policyapi.ParseSelector(&np.Spec.PodSelector); err == nil {
		failed.PodSelector = sel
	} else {
		failed.PodSelector, _ = policyapi.ParseSelector(&policyapi.LabelSelector{})
	}
	failed.Applies = [2]bool{true, true}
	types := policyapi.PolicyTypes(&np.Spec)
	if !slices.ContainsFunc(types, func(t policyapi.PolicyType) bool {
		return t != policyapi.PolicyTypeIngress && t != policyapi.PolicyTypeEgress
	}) {
		failed.Applies = [2]bool{}
		for _, t := range types {
			failed.Applies[policyapi.Egress] = failed.Applies[policyapi.Egress] || t == policyapi.PolicyTypeEgress
			failed.Applies[policyapi.Ingress] = failed.Applies[policyapi.Ingress] || t == policyapi.PolicyTypeIngress
		}
	}
	return failed
}

// failedReasons joins the reasons of the failed policies among ps, in
// the order of their names.
func failedReasons(ps []*policyapi.ParsedPolicy) string {
	var reasons []string
	for _, cp := range ps {
		if cp.Failed != "" {
			reasons = append(reasons, cp.Failed)
		}
	}
	slices.Sort(reasons)
	return strings.Join(reasons, "; ")
}

// failedNames lists, sorted and once each, the names of the failed
// policies among selecting (see EndpointPolicy.FailedPolicies); nil when
// none failed.
func failedNames(selecting [2][]*policyapi.ParsedPolicy) []string {
	var names []string
	for _, ps := range selecting {
		for _, cp := range ps {
			if cp.Failed != "" {
				names = append(names, cp.Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// isolatorNames names, by direction, the policies of selecting
// (EndpointPolicy.Isolators): sorted, nil for a direction none selects.
func isolatorNames(selecting [2][]*policyapi.ParsedPolicy) [2][]string {
	var out [2][]string
	for d, ps := range selecting {
		for _, cp := range ps {
			out[d] = append(out[d], cp.Name)
		}
		slices.Sort(out[d])
	}
	return out
}

// tooManyReason is the reason a direction of an endpoint fails when its
// rules for key k need n port ranges; policies names those selecting the
// endpoint for the direction.
func tooManyReason(k RuleKey, n int, policies []string) string {
	policies = slices.Sorted(slices.Values(policies))
	return fmt.Sprintf("%s rules for peer %d protocol %d need %d port ranges, at most %d fit (policies: %s); merge ports into ranges with endPort",
		k.Dir, k.Peer, k.Proto, n, MaxPortRanges, strings.Join(policies, ", "))
}
