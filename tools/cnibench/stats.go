//go:build linux

package main

import (
	"math"
	"slices"
	"time"
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
		p50: percentile(sorted, 50),
		p90: percentile(sorted, 90),
		p99: percentile(sorted, 99),
		max: sorted[len(sorted)-1],
	}
}

// percentile returns the nearest-rank p-th percentile of sorted: the
// smallest value with at least p% of the values at or below it. With 300
// values, p99 is the 297th.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// perSecond returns how many of n things per second a wall time of d means.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// progress prints "done/total" on stderr at every tenth of the way.
type progress struct {
	what        string
	total, done int
	nextTenth   int
}

func newProgress(what string, total int) *progress {
	return &progress{what: what, total: total, nextTenth: 1}
}

func (p *progress) step() {
	p.done++
	if p.done*10 >= p.nextTenth*p.total {
		logf("  %s: %d/%d", p.what, p.done, p.total)
		for p.done*10 >= p.nextTenth*p.total {
			p.nextTenth++
		}
	}
}
