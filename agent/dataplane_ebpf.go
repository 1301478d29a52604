package agent

import (
	"fmt"
	"io"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/internal/promtext"
	"lockstep.dev/lockstep/maps"
)

// ebpfDataplane is the eBPF dataplane as the agent drives it: the
// datapath's own methods (enforcer.Dataplane, enforcer.Invalidator,
// enforcer.AttachChecker, io.Closer) and, added here because they speak
// the agent's formats, Counter and MetricsWriter.
type ebpfDataplane struct {
	*datapath.Datapath
}

// WriteMetrics writes, at scrape time, the BPF verdict counters by
// reason, each endpoint's conntrack entries and refusals, and the entry
// count of every map.
func (dp ebpfDataplane) WriteMetrics(w io.Writer) {
	if counters, err := dp.Counters(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_packets_total", "Packets the eBPF programs counted, by reason (drops by cause, allowed new connections, allowed-node: packets of the node itself to pods whose ingress is isolated, service-no-backend: connections to a Service without a ready backend, refused, and conntrack-share: new connections beyond their endpoint's conntrack share, dropped).", "counter")
		promtext.WriteHeader(w, "lockstep_datapath_bytes_total", "Bytes of the packets in lockstep_datapath_packets_total.", "counter")
		for _, reason := range sortedKeys(counters) {
			promtext.WriteSample(w, "lockstep_datapath_packets_total", float64(counters[reason].Packets), "reason", reason)
			promtext.WriteSample(w, "lockstep_datapath_bytes_total", float64(counters[reason].Bytes), "reason", reason)
		}
	}
	if shares, err := dp.ConntrackShares(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_entries", fmt.Sprintf("Conntrack entries an endpoint holds (the programs' estimate, never below the truth), by host interface; each may hold %d.", maps.CTShareLimit), "gauge")
		promtext.WriteHeader(w, "lockstep_datapath_conntrack_refused_total", "New connections dropped because their endpoint held its whole conntrack share, by host interface.", "counter")
		for _, name := range sortedKeys(shares) {
			promtext.WriteSample(w, "lockstep_datapath_conntrack_entries", float64(shares[name].Entries), "interface", name)
			promtext.WriteSample(w, "lockstep_datapath_conntrack_refused_total", float64(shares[name].Refused), "interface", name)
		}
	}
	if stats, err := dp.Stats(); err == nil {
		promtext.WriteHeader(w, "lockstep_datapath_map_entries", "Entries in each pinned BPF map.", "gauge")
		for _, name := range sortedKeys(stats) {
			promtext.WriteSample(w, "lockstep_datapath_map_entries", float64(stats[name]), "map", name)
		}
	}
}

// Counts reports the map entry counts for `lockstep status`.
func (dp ebpfDataplane) Counts() map[string]int {
	stats, _ := dp.Stats()
	out := make(map[string]int, len(stats))
	for name, n := range stats {
		out["map "+name] = n
	}
	return out
}
