package iptables

import (
	"io"
	"maps"
	"slices"
	"time"

	"lockstep.dev/lockstep/internal/promtext"
)

// CompactAfter is how long the dataplane must go without an apply before
// CompactDue reports its unreachable rules due for Compact, off every
// pod's and policy's latency path.
const CompactAfter = 2 * time.Second

// CompactDue reports that the tables hold unreachable rules (iptables-nft
// changes leave them: see Stats.DeadRules) and no Apply has finished for
// CompactAfter, so Compact may remove them now.
func (d *Dataplane) CompactDue() bool {
	s := d.Stats()
	return s.DeadRules > 0 && time.Since(s.LastApplyEnd) >= CompactAfter
}

// Counts reports the sets, set entries, chains, rules and unreachable
// rules lockstep holds, as of the last successful Apply, for `lockstep
// status`.
func (d *Dataplane) Counts() map[string]int {
	return d.Stats().counts()
}

func (s Stats) counts() map[string]int {
	return map[string]int{"sets": s.Sets, "set entries": s.SetEntries, "chains": s.Chains, "rules": s.Rules, "unreachable rules": s.DeadRules}
}

// WriteMetrics writes the dataplane's sizes and apply counts in the
// Prometheus text format, for the agent's /metrics.
func (d *Dataplane) WriteMetrics(w io.Writer) {
	s := d.Stats()
	counts := s.counts()
	promtext.WriteHeader(w, "lockstep_iptables_objects", "ipsets, set entries, chains and rules lockstep holds in the iptables dataplane.", "gauge")
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		promtext.WriteSample(w, "lockstep_iptables_objects", float64(counts[kind]), "kind", kind)
	}
	promtext.WriteHeader(w, "lockstep_iptables_applies_total", "Applies of the iptables dataplane, by kind: all, full (read back the state first, after a failure or restart) and failed.", "counter")
	promtext.WriteSample(w, "lockstep_iptables_applies_total", float64(s.Applies), "kind", "all")
	promtext.WriteSample(w, "lockstep_iptables_applies_total", float64(s.FullReconciles), "kind", "full")
	promtext.WriteSample(w, "lockstep_iptables_applies_total", float64(s.Failures), "kind", "failed")
}
