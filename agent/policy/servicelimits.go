package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ServiceFrontendCapacity and ServiceBackendCapacity are the frontends
// and backends one state of the eBPF dataplane's Service maps holds
// (lockstep_services and lockstep_backends, per parity); the agent's
// limits keep every compiled state within them.
const (
	ServiceFrontendCapacity = 32768
	ServiceBackendCapacity  = 131072
)

// MaxBackendsPerFrontend is the most backends the eBPF dataplane holds
// for one frontend; Limits.ServiceBackends also bounds each frontend by
// it.
const MaxBackendsPerFrontend = 65533

// serviceCost is what the Services of one Service, or of a namespace,
// ask of the node's Service maps: the frontends lockstep would translate,
// their backends summed over frontends, and how many of those frontends
// have more than MaxBackendsPerFrontend backends. A frontend two Services
// claim counts for both, so a namespace may count more than the maps
// would hold of it.
type serviceCost struct{ frontends, backends, wide int }

func (c serviceCost) add(o serviceCost) serviceCost {
	return serviceCost{c.frontends + o.frontends, c.backends + o.backends, c.wide + o.wide}
}

func (c serviceCost) sub(o serviceCost) serviceCost {
	return serviceCost{c.frontends - o.frontends, c.backends - o.backends, c.wide - o.wide}
}

// serviceCostOf counts the entries of one Service that lockstep would
// translate.
func serviceCostOf(entries map[ServiceFrontend]*ServiceEntry) serviceCost {
	var c serviceCost
	for _, e := range entries {
		if !e.leftToKubeProxy {
			c.frontends++
			c.backends += len(e.Backends)
			if len(e.Backends) > MaxBackendsPerFrontend {
				c.wide++
			}
		}
	}
	return c
}

// servicesOver returns, for every namespace whose Services lockstep does
// not translate under the limits, why; nil when all fit. Without a bound
// one tenant's Services could ask for more than the node's Service maps
// hold, and a state that does not fit is one no dataplane applies: every
// other tenant's policy and Service changes, and every CNI ADD of the
// node, would wait behind it. So a namespace with a frontend of more than
// MaxBackendsPerFrontend backends goes (when ServiceBackends is set), and
// when the others still ask for more than ServiceFrontends or
// ServiceBackends, those with the largest share (the larger of their
// share of the frontends and of the backends) go until the rest fit, and
// every namespace with a share as large as the last one's goes with it,
// as overBudget fails namespaces of equal size together: the result
// depends on the costs alone, never on the names. kube-proxy, where it
// runs, still translates the Services of a namespace that goes; the
// dataplanes judge pods' connections to them on the ClusterIP.
//
// Like overBudget, this bounds what naming can do, not what numbers can:
// a tenant whose namespaces each ask for just less than another's can
// make that one the largest, and so the first to go, and one that asks
// for exactly as much takes it along. What a tenant may create (quotas on
// Services, who may write EndpointSlices) bounds that.
func (l Limits) servicesOver(costs map[string]serviceCost) map[string]string {
	var out map[string]string
	var total serviceCost
	for ns, c := range costs {
		if l.ServiceBackends > 0 && c.wide > 0 {
			mak(&out)[ns] = fmt.Sprintf("namespace %s has a Service frontend of more than %d backends, the most the node's Service maps hold for one: %s", ns, MaxBackendsPerFrontend, servicesGone)
			continue
		}
		total = total.add(c)
	}
	fits := func() bool {
		return (l.ServiceFrontends <= 0 || total.frontends <= l.ServiceFrontends) &&
			(l.ServiceBackends <= 0 || total.backends <= l.ServiceBackends)
	}
	if fits() {
		return out
	}
	// share compares c.frontends/ServiceFrontends with
	// c.backends/ServiceBackends without division: each scaled by the
	// other bound.
	share := func(c serviceCost) int64 {
		var s int64
		if l.ServiceFrontends > 0 {
			s = int64(c.frontends) * int64(max(l.ServiceBackends, 1))
		}
		if l.ServiceBackends > 0 {
			s = max(s, int64(c.backends)*int64(max(l.ServiceFrontends, 1)))
		}
		return s
	}
	var namespaces []string
	for ns := range costs {
		if _, gone := out[ns]; !gone {
			namespaces = append(namespaces, ns)
		}
	}
	slices.SortFunc(namespaces, func(a, b string) int { return cmp.Compare(share(costs[b]), share(costs[a])) })
	var bounds []string
	if l.ServiceFrontends > 0 {
		bounds = append(bounds, fmt.Sprintf("%d frontends", l.ServiceFrontends))
	}
	if l.ServiceBackends > 0 {
		bounds = append(bounds, fmt.Sprintf("%d backends", l.ServiceBackends))
	}
	capacity := strings.Join(bounds, " and ")
	var cut int64 = -1 // the share of the last namespace gone
	for _, ns := range namespaces {
		c := costs[ns]
		if fits() && share(c) != cut {
			break
		}
		total = total.sub(c)
		cut = share(c)
		mak(&out)[ns] = fmt.Sprintf("the Services of all namespaces ask for more than the node's Service maps hold (%s), and namespace %s's for %d frontends and %d backends, one of the largest shares (namespaces of equal share go together): %s",
			capacity, ns, c.frontends, c.backends, servicesGone)
	}
	return out
}

// servicesGone ends the reason a namespace's Services are not translated.
const servicesGone = "lockstep does not translate its Services (kube-proxy does, where it runs), and the dataplanes judge pods' connections to them on the ClusterIP"

// serviceNamespace is the namespace of the Service k names.
func serviceNamespace(k objKey) string { return policyapi.NamespaceOrDefault(k.ns) }
