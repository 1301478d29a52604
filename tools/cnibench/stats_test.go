//go:build linux

package main

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(n-i) * time.Millisecond // reversed: summarize must sort
		}
		return d
	}
	for _, tc := range []struct {
		name               string
		in                 []time.Duration
		p50, p90, p99, max time.Duration
	}{
		{"300 values: p99 is the 297th", ms(300), 150 * time.Millisecond, 270 * time.Millisecond, 297 * time.Millisecond, 300 * time.Millisecond},
		{"100 values", ms(100), 50 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond},
		{"one value is every percentile", ms(1), time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond},
		{"no values", nil, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := summarize(tc.in)
			if s.p50 != tc.p50 || s.p90 != tc.p90 || s.p99 != tc.p99 || s.max != tc.max {
				t.Fatalf("summarize = p50 %v p90 %v p99 %v max %v; want %v %v %v %v",
					s.p50, s.p90, s.p99, s.max, tc.p50, tc.p90, tc.p99, tc.max)
			}
			if s.n != len(tc.in) {
				t.Fatalf("n = %d, want %d", s.n, len(tc.in))
			}
		})
	}
}

func TestSummarizeLeavesInputAlone(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Fatalf("summarize reordered its input: %v", in)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1234 * time.Microsecond:   "1.23 ms",
		12345 * time.Microsecond:  "12.3 ms",
		123456 * time.Microsecond: "123 ms",
	} {
		if got := benchkit.FmtDur(d); got != want {
			t.Errorf("benchkit.FmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}
