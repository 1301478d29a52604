package agent

import (
	"io"
	"sort"

	"lockstep.dev/lockstep/agent/cleanup"
	"lockstep.dev/lockstep/agent/enforcer"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/promtext"
)

// dataplaneMetrics writes, at scrape time, the backend's own samples, the
// backend in use, the endpoints resyncs attached again, pending clean-ups
// and their attempts, gauges of the
// committed policy state (endpoints, identities, selectors, policies,
// Services, EndpointSlices) and of the Service translation last applied.
func dataplaneMetrics(be *backend, cleanups *cleanup.Manager, st *store.Store, enf *enforcer.Enforcer) func(io.Writer) {
	return func(w io.Writer) {
		be.writeMetrics(w)
		promtext.WriteHeader(w, "lockstep_dataplane_info", "The dataplane backend the agent enforces policy with.", "gauge")
		promtext.WriteSample(w, "lockstep_dataplane_info", 1, "backend", be.name)
		pending := cleanups.Pending()
		promtext.WriteHeader(w, "lockstep_dataplane_cleanups_pending", "Backends lockstep stopped using and still has to clean, with the attempts made so far.", "gauge")
		for _, c := range pending {
			promtext.WriteSample(w, "lockstep_dataplane_cleanups_pending", float64(c.Attempts), "backend", c.Backend)
		}
		promtext.WriteHeader(w, "lockstep_dataplane_reattached_total", "Endpoints a periodic resync found without the dataplane's hooks on their host interface (removed behind lockstep's back, so not enforced) and attached again.", "counter")
		promtext.WriteSample(w, "lockstep_dataplane_reattached_total", float64(enf.Reattached()))
		attempts := cleanups.AttemptCounts()
		promtext.WriteHeader(w, "lockstep_dataplane_cleanup_attempts_total", "Clean-up attempts of unused dataplane backends since the agent started, by result.", "counter")
		for _, b := range sortedKeys(attempts) {
			promtext.WriteSample(w, "lockstep_dataplane_cleanup_attempts_total", float64(attempts[b].Succeeded), "backend", b, "result", "done")
			promtext.WriteSample(w, "lockstep_dataplane_cleanup_attempts_total", float64(attempts[b].Failed), "backend", b, "result", "failed")
		}
		txn := st.ReadTxn()
		eps, _ := store.Endpoints(txn, nil)
		byState := map[string]int{}
		for _, e := range eps {
			byState[e.State.String()]++
		}
		promtext.WriteHeader(w, "lockstep_endpoints", "Local endpoints by life-cycle state.", "gauge")
		for _, s := range sortedKeys(byState) {
			promtext.WriteSample(w, "lockstep_endpoints", float64(byState[s]), "state", s)
		}
		ids, _ := store.Identities(txn, nil)
		sels, _ := store.Selectors(txn, nil)
		pols, _ := store.Policies(txn, nil)
		pods, _ := store.Pods(txn, nil)
		svcs, _ := store.Services(txn, nil)
		slices, _ := store.EndpointSlices(txn, nil)
		applied := enf.Services()
		for _, g := range []struct {
			name, help string
			n          int
		}{
			{"lockstep_identities", "Pod identities (distinct label sets) in the committed state.", len(ids)},
			{"lockstep_selectors", "Label selectors committed policies refer to.", len(sels)},
			{"lockstep_network_policies", "NetworkPolicies in the committed state.", len(pols)},
			{"lockstep_pods", "Pods known to the agent, local and remote.", len(pods)},
			{"lockstep_services", "Services in the committed state.", len(svcs)},
			{"lockstep_endpoint_slices", "EndpointSlices in the committed state.", len(slices)},
			{"lockstep_service_frontends", "Service frontends (ClusterIP, port, protocol) the dataplane translates, as of the last apply.", applied.Frontends},
			{"lockstep_service_backends", "Backends of the Service frontends, summed over frontends, as of the last apply.", applied.Backends},
			{"lockstep_service_frontends_without_backends", "Service frontends with no ready endpoint (connections refused), as of the last apply.", applied.NoBackends},
			{"lockstep_service_frontends_without_local_backends", "Service frontends of internalTrafficPolicy Local whose ready endpoints are all on other nodes (this node's pods' connections dropped), as of the last apply.", applied.NoLocalBackends},
		} {
			promtext.WriteHeader(w, g.name, g.help, "gauge")
			promtext.WriteSample(w, g.name, float64(g.n))
		}
		f := enf.Failures()
		writePolicyFailures(w, f)
		writeServicesOverCapacity(w, f)
	}
}

// writeServicesOverCapacity writes the namespaces whose Services lockstep
// does not translate because the node's Service maps cannot hold them: a
// count, then one sample per namespace.
func writeServicesOverCapacity(w io.Writer, f enforcer.Failures) {
	promtext.WriteHeader(w, "lockstep_service_namespaces_over_capacity", "Namespaces whose Services the last apply does not translate because the node's Service maps cannot hold every namespace's (the largest shares go first), or one of its frontends has more backends than they hold for one; kube-proxy, where it runs, translates them, and pods' connections to them are judged on the ClusterIP.", "gauge")
	promtext.WriteSample(w, "lockstep_service_namespaces_over_capacity", float64(len(f.Services)))
	promtext.WriteHeader(w, "lockstep_service_namespace_over_capacity", "1 for each namespace whose Services are not translated, over the node's Service capacity.", "gauge")
	for _, ns := range sortedKeys(f.Services) {
		promtext.WriteSample(w, "lockstep_service_namespace_over_capacity", 1, "namespace", ns)
	}
}

// writePolicyFailures writes what the state applied last fails closed on:
// a count, then one sample per failed policy and per endpoint direction,
// so an alert can name them.
func writePolicyFailures(w io.Writer, f enforcer.Failures) {
	promtext.WriteHeader(w, "lockstep_policy_failures", "NetworkPolicies the last apply could not enforce as written (they do not compile, or their namespace is over its budget); the pods they select fail closed.", "gauge")
	promtext.WriteSample(w, "lockstep_policy_failures", float64(len(f.Policies)))
	promtext.WriteHeader(w, "lockstep_policy_failed", "1 for each NetworkPolicy that fails closed.", "gauge")
	for _, name := range sortedKeys(f.Policies) {
		promtext.WriteSample(w, "lockstep_policy_failed", 1, "policy", name)
	}
	promtext.WriteHeader(w, "lockstep_endpoint_policy_failed", "1 for each local endpoint and direction that fails closed: isolated, with no allow.", "gauge")
	for _, ef := range f.Endpoints {
		for d, why := range ef.Reasons {
			if why != "" {
				promtext.WriteSample(w, "lockstep_endpoint_policy_failed", 1, "endpoint", ef.HostIf, "direction", policyapi.Direction(d).String())
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
