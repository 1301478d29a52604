package agent

import (
	"io"
	"sort"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/promtext"
)

// dataplaneMetrics writes, at scrape time, the BPF verdict counters by
// reason, the entry count of every map, and gauges of the committed policy
// state (endpoints, identities, selectors, policies).
func dataplaneMetrics(dp *datapath.Datapath, st *store.Store) func(io.Writer) {
	return func(w io.Writer) {
		if counters, err := dp.Counters(); err == nil {
			promtext.WriteHeader(w, "lockstep_datapath_packets_total", "Packets the eBPF programs counted, by reason (drops by cause, and allowed new connections).", "counter")
			promtext.WriteHeader(w, "lockstep_datapath_bytes_total", "Bytes of the packets in lockstep_datapath_packets_total.", "counter")
			for _, reason := range sortedKeys(counters) {
				promtext.WriteSample(w, "lockstep_datapath_packets_total", float64(counters[reason].Packets), "reason", reason)
				promtext.WriteSample(w, "lockstep_datapath_bytes_total", float64(counters[reason].Bytes), "reason", reason)
			}
		}
		if stats, err := dp.Stats(); err == nil {
			promtext.WriteHeader(w, "lockstep_datapath_map_entries", "Entries in each pinned BPF map.", "gauge")
			for _, name := range sortedKeys(stats) {
				promtext.WriteSample(w, "lockstep_datapath_map_entries", float64(stats[name]), "map", name)
			}
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
		for _, g := range []struct {
			name, help string
			n          int
		}{
			{"lockstep_identities", "Pod identities (distinct label sets) in the committed state.", len(ids)},
			{"lockstep_selectors", "Label selectors committed policies refer to.", len(sels)},
			{"lockstep_network_policies", "NetworkPolicies in the committed state.", len(pols)},
			{"lockstep_pods", "Pods known to the agent, local and remote.", len(pods)},
		} {
			promtext.WriteHeader(w, g.name, g.help, "gauge")
			promtext.WriteSample(w, g.name, float64(g.n))
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
