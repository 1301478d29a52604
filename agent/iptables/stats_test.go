package iptables

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCompactDue: unreachable rules are due for Compact only once the
// dataplane has gone CompactAfter without an apply.
func TestCompactDue(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dead      int
		idleSince time.Duration
		want      bool
	}{
		{"no unreachable rules, long idle", 0, time.Hour, false},
		{"unreachable rules, just applied", 3, 0, false},
		{"unreachable rules, idle just short", 3, CompactAfter - 500*time.Millisecond, false},
		{"unreachable rules, idle long enough", 3, CompactAfter, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDataplane(t, ModeNFT, newFakeNode())
			d.stats.DeadRules, d.stats.LastApplyEnd = tc.dead, time.Now().Add(-tc.idleSince)
			if got := d.CompactDue(); got != tc.want {
				t.Fatalf("CompactDue() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCountsAndMetricsFollowStats: what `lockstep status` and /metrics
// show of the dataplane are the sizes of the last apply.
func TestCountsAndMetricsFollowStats(t *testing.T) {
	want := manyEndpoints(20, 0)
	d := newTestDataplane(t, ModeNFT, newFakeNode(), want)
	mustApply(t, d, want)
	s := d.Stats()
	if s.Rules == 0 || s.Sets == 0 {
		t.Fatalf("an apply of 20 endpoints left %+v: the checks below show nothing", s)
	}
	counts := d.Counts()
	for kind, n := range map[string]int{"sets": s.Sets, "set entries": s.SetEntries, "chains": s.Chains, "rules": s.Rules, "unreachable rules": s.DeadRules} {
		if counts[kind] != n {
			t.Errorf("Counts()[%q] = %d, Stats says %d", kind, counts[kind], n)
		}
	}
	var buf bytes.Buffer
	d.WriteMetrics(&buf)
	for _, line := range []string{
		fmt.Sprintf(`lockstep_iptables_objects{kind="rules"} %d`, s.Rules),
		fmt.Sprintf(`lockstep_iptables_objects{kind="sets"} %d`, s.Sets),
		fmt.Sprintf(`lockstep_iptables_applies_total{kind="all"} %d`, s.Applies),
	} {
		if !strings.Contains(buf.String(), line+"\n") {
			t.Errorf("no %q in the metrics:\n%s", line, buf.String())
		}
	}
}
