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
// for one frontend. A Service with a frontend of more is left to
// kube-proxy whole (ServiceEntry.leftToKubeProxy), as one with too many
// external frontends is.
const MaxBackendsPerFrontend = 65533

// serviceCost is what the Services of one Service, or of a namespace,
// ask of the node's Service maps: the frontends lockstep would translate
// and their backends, summed over frontends. A frontend two Services
// claim counts for both.
type serviceCost struct{ frontends, backends int }

func (c serviceCost) add(o serviceCost) serviceCost {
	return serviceCost{c.frontends + o.frontends, c.backends + o.backends}
}

func (c serviceCost) sub(o serviceCost) serviceCost {
	return serviceCost{c.frontends - o.frontends, c.backends - o.backends}
}

// serviceCostOf counts the entries of one Service that lockstep would
// translate.
func serviceCostOf(entries map[ServiceFrontend]*ServiceEntry) serviceCost {
	var c serviceCost
	for _, e := range entries {
		if !e.leftToKubeProxy {
			c.frontends++
			c.backends += len(e.Backends)
		}
	}
	return c
}

// servicesOver returns, for every namespace whose Services the limits
// leave to kube-proxy, why; nil when all fit. Without a bound one
// tenant's Services could fill the node's Service maps, and a state that
// does not fit is one no dataplane applies: every other tenant's policy
// and Service changes, and every CNI ADD of the node, would wait behind
// it. So when the Services ask for more than ServiceFrontends or
// ServiceBackends, the namespaces with the largest share (the larger of
// their share of the frontends and of the backends) are left to
// kube-proxy until the rest fit, and every namespace with a share as
// large as the last one left goes with it, as overBudget fails
// namespaces of equal size together: the result depends on the costs
// alone, never on the names. kube-proxy still translates the Services
// left to it; the dataplanes judge a pod's connection to them on the
// ClusterIP, as with translation turned off.
func (l Limits) servicesOver(costs map[string]serviceCost) map[string]string {
	var total serviceCost
	for _, c := range costs {
		total = total.add(c)
	}
	fits := func() bool {
		return (l.ServiceFrontends <= 0 || total.frontends <= l.ServiceFrontends) &&
			(l.ServiceBackends <= 0 || total.backends <= l.ServiceBackends)
	}
	if fits() {
		return nil
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
	namespaces := make([]string, 0, len(costs))
	for ns := range costs {
		namespaces = append(namespaces, ns)
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
	out := map[string]string{}
	var cut int64 = -1 // the share of the last namespace left
	for _, ns := range namespaces {
		c := costs[ns]
		if fits() && share(c) != cut {
			break
		}
		total = total.sub(c)
		cut = share(c)
		out[ns] = fmt.Sprintf("the node's Service maps are full (they hold %s) and namespace %s's Services hold %d frontends and %d backends, one of the largest shares (namespaces of equal share go together): kube-proxy translates them, and the dataplanes judge pods' connections to them on the ClusterIP",
			capacity, ns, c.frontends, c.backends)
	}
	return out
}

// serviceNamespace is the namespace of the Service k names.
func serviceNamespace(k objKey) string { return policyapi.NamespaceOrDefault(k.ns) }
