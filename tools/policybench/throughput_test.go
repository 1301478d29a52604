//go:build linux

package main

import "testing"

func TestParseIperf(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64
		wantErr   bool
	}{
		{"report", `{"start":{},"intervals":[],"end":{"sum_sent":{"bits_per_second":2.1e10},"sum_received":{"bits_per_second":2.05e10}}}`, 2.05e10, false},
		{"refused", `{"start":{},"intervals":[],"end":{},"error":"error - unable to connect to server: Connection refused"}`, 0, true},
		{"empty", ``, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIperf([]byte(tc.out))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd: got %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even: got %v", got)
	}
}

func TestThroughputRounds(t *testing.T) {
	// Each mode runs first in some round, and in every position once
	// over len(throughputModes) rounds.
	for pos := range throughputModes {
		seen := map[string]bool{}
		for round := range throughputModes {
			seen[throughputModes[(round+pos)%len(throughputModes)]] = true
		}
		if len(seen) != len(throughputModes) {
			t.Errorf("position %d over %d rounds runs only %v", pos, len(throughputModes), seen)
		}
	}
	var r throughputResult
	for _, m := range []struct {
		mode string
		bps  float64
	}{{modeOn, 9}, {modePass, 10}, {modeOff, 10}, {modePass, 12}, {modeOff, 12}, {modeOn, 12}} {
		r.add(m.mode, m.bps)
	}
	if got := fmtRatios(r.ratios()); got != "0.90, 1.00" {
		t.Errorf("per-round on ÷ off %s, want 0.90, 1.00", got)
	}
}

func TestRunTimes(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs map[string]progRuns
		want string
	}{
		{"unmeasured", nil, "not measured (no BPF run-time statistics on this kernel)"},
		{"measured", map[string]progRuns{
			"from_pod": {count: 4, time: 1000},
			"to_pod":   {count: 2, time: 500},
		}, "from_pod 250 ns (4 runs), to_pod 250 ns (2 runs), pass 0 ns (0 runs)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &throughputResult{runs: tc.runs}
			if got := r.runTimes(); got != tc.want {
				t.Errorf("runTimes() = %q, want %q", got, tc.want)
			}
		})
	}
}
