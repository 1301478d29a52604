package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the nearest-rank p-th percentile of d (the smallest
// value with at least p% of the values at or below it); d is not modified.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sorted := slices.Clone(d)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// fmtDur renders a duration in milliseconds, the unit every table uses.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", ms)
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
