//go:build linux

package main

import (
	"slices"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

// summary condenses a set of timings.
type summary struct {
	n                  int
	p50, p90, p99, max time.Duration
}

// summarize returns the nearest-rank percentiles of d; d is not modified.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	sorted := slices.Clone(d)
	slices.Sort(sorted)
	return summary{
		n:   len(sorted),
		p50: benchkit.Percentile(sorted, 50),
		p90: benchkit.Percentile(sorted, 90),
		p99: benchkit.Percentile(sorted, 99),
		max: sorted[len(sorted)-1],
	}
}

// perSecond returns how many of n things per second a wall time of d means.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
