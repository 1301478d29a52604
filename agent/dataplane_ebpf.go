package agent

import (
	"errors"
	"fmt"
	"io"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/internal/promtext"
)

// ebpfDataplane is the eBPF dataplane as the agent drives it: the
// datapath's own methods (enforcer.Dataplane, enforcer.Invalidator,
// enforcer.AttachChecker, io.Closer) and, added here because they speak
// the agent's formats, Counter and MetricsWriter.
type ebpfDataplane struct {
	*datapath.Datapath
}

// WriteMetrics writes, at scrape time, the BPF verdict counters by
// reason and by policy, each endpoint's conntrack entries and refusals, the node's
// conntrack entries, the conntrack tables' evictions and the reclaimer's
// races, and the entry count of every map.
func (dp ebpfDataplane) WriteMetrics(w io.Writer) {
	if counters, err := dp.Counters(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_packets_total", "Packets the eBPF programs counted, by reason (drops by cause, allowed new connections, allowed-node: packets of the node itself to pods whose ingress is isolated, service-no-backend: connections to a Service without a ready backend, refused, or without one on this node under internalTrafficPolicy Local, dropped, and conntrack-share: new connections beyond their endpoint's conntrack share while the node's tables were under pressure, dropped, and service-port-clash: new connections to a Service whose translated tuple another connection held and no other source port was free, dropped).", "counter")
		promtext.WriteHeader(w, "lockstep_datapath_bytes_total", "Bytes of the packets in lockstep_datapath_packets_total.", "counter")
		for _, reason := range sortedKeys(counters) {
			promtext.WriteSample(w, "lockstep_datapath_packets_total", float64(counters[reason].Packets), "reason", reason)
			promtext.WriteSample(w, "lockstep_datapath_bytes_total", float64(counters[reason].Bytes), "reason", reason)
		}
	}
	// A map that could not be read leaves out its part (the datapath
	// logs it); the rest is written.
	if vs, err := dp.PolicyVerdicts(); !errors.Is(err, errors.ErrUnsupported) {
		writePolicyVerdicts(w, vs)
	}
	promtext.WriteHeader(w, "lockstep_datapath_rule_ids_exhausted_total", fmt.Sprintf("Policy rules that went without a rule id because all %d were in use, since the agent started (each once until ids are freed again): they are enforced, but their verdict events say \"rule ids exhausted\" and their connections count for no policy until an apply names them.", bpfmaps.MaxRuleIDs-1), "counter")
	promtext.WriteSample(w, "lockstep_datapath_rule_ids_exhausted_total", float64(dp.RuleIDsExhaustedTotal()))
	if shares, err := dp.ConntrackShares(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_entries", fmt.Sprintf("Conntrack entries an endpoint holds (the programs' estimate, never below the truth), by host interface; each may hold %d of each direction while the node is under pressure (lockstep_datapath_conntrack_node_entries above %d).", bpfmaps.CTShareLimit, bpfmaps.CTPressure), "gauge")
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_refused_total", "New connections dropped because their endpoint held its whole conntrack share while the node was under pressure, by host interface.", "counter")
		for _, name := range sortedKeys(shares) {
			promtext.WriteSample(w, "lockstep_datapath_conntrack_entries", float64(shares[name].Entries), "interface", name)
			promtext.WriteSample(w, "lockstep_datapath_conntrack_refused_total", float64(shares[name].Refused), "interface", name)
		}
	}
	if held, err := dp.ConntrackHeld(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_node_entries", fmt.Sprintf("Conntrack entries the node holds in both tables together (the programs' estimate, never below the truth); the endpoints' shares are enforced while it is above %d.", bpfmaps.CTPressure), "gauge")
		promtext.WriteSample(w, "lockstep_datapath_conntrack_node_entries", float64(held))
	}
	if evicted, err := dp.ConntrackEvictions(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_evictions_total", fmt.Sprintf("Conntrack entries a full table (an LRU of %d entries) dropped to make room for a new connection, by table (lockstep_ct, lockstep_svc_ct), as of the agent's last reclaim (every 10 s). The connections they held are judged by policy again (a translated one may change backend).", bpfmaps.CTCapacity), "counter")
		for _, table := range sortedKeys(evicted) {
			promtext.WriteSample(w, "lockstep_datapath_conntrack_evictions_total", float64(evicted[table]), "table", table)
		}
	}
	promtext.WriteHeader(w, "lockstep_datapath_conntrack_reclaim_races_total", "Expired conntrack entries the agent's reclaimer took out that a new connection had made live again since it read them, put back, since the agent started.", "counter")
	promtext.WriteSample(w, "lockstep_datapath_conntrack_reclaim_races_total", float64(dp.ConntrackReclaimRaces()))
	if stats, err := dp.Stats(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_map_entries", "Entries in each pinned BPF map.", "gauge")
		for _, name := range sortedKeys(stats) {
			promtext.WriteSample(w, "lockstep_datapath_map_entries", float64(stats[name]), "map", name)
		}
	}
}

// Counts reports the map entry counts and the conntrack tables' evictions
// for `lockstep status`.
func (dp ebpfDataplane) Counts() map[string]int {
	stats, _ := dp.Stats()
	evicted, _ := dp.ConntrackEvictions()
	out := make(map[string]int, len(stats)+len(evicted))
	for name, n := range stats {
		out["map "+name] = n
	}
	for table, n := range evicted {
		out["evicted from "+table] = int(n)
	}
	return out
}

// writePolicyVerdicts writes lockstep_policy_verdicts_total: one allow and
// one deny sample per policy and direction the datapath reports, which
// are the policies isolating a local endpoint as last applied (a deleted
// policy has no series).
func writePolicyVerdicts(w io.Writer, vs []datapath.PolicyVerdict) {
	promtext.WriteHeader(w, "lockstep_policy_verdicts_total", "What each NetworkPolicy decided on this node, by direction: verdict allow counts the new connections its rules allowed (not their later packets), deny the packets dropped by default deny at the local pods it isolates in that direction; a drop at a pod several policies isolate counts for each of them. Only the eBPF dataplane counts.", "counter")
	for _, v := range vs {
		dir := v.Dir.String()
		promtext.WriteSample(w, "lockstep_policy_verdicts_total", float64(v.Allowed), "namespace", v.Namespace, "policy", v.Name, "direction", dir, "verdict", "allow")
		promtext.WriteSample(w, "lockstep_policy_verdicts_total", float64(v.Denied), "namespace", v.Namespace, "policy", v.Name, "direction", dir, "verdict", "deny")
	}
}
