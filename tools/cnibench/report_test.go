//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

func TestCommandLineHidesMachinePaths(t *testing.T) {
	got := benchkit.CommandLine("tools/cnibench", []string{"-out", "/src/lockstep/BENCHMARKS.md", "-bin=/src/lockstep/bin", "-work", "/home/me/scratch", "-ref-plugins", "/usr/lib/cni", "-n", "50"}, "/src/lockstep")
	want := "go run ./tools/cnibench -out BENCHMARKS.md -bin=bin -work …/scratch -ref-plugins /usr/lib/cni -n 50"
	if got != want {
		t.Fatalf("commandLine = %q\nwant          %q", got, want)
	}
}

func TestTargets(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	burst := func(ok int, wall time.Duration) burstResult {
		return burstResult{pods: 128, addOK: ok, delOK: 128, addWall: wall}
	}
	// newReport returns a run that meets every target but the ADD p99 (12 ms).
	newReport := func() *report {
		return &report{cfg: config{burst: 128}, hello: &hello{execFloor: ms(1, 1, 1)}, sides: []*side{{
			key: lockstepKey, add: ms(1, 2, 12), addCPU: ms(1, 1, 1), execFloor: ms(1.2, 1.4, 9),
			burst: burst(128, 100*time.Millisecond), // 1280 pods/s
		}, {
			key: referenceKey, add: ms(4, 4, 4), addCPU: ms(3, 3, 3), execFloor: ms(2, 2, 2),
			burst: burst(128, 200*time.Millisecond), // 640 pods/s
		}}}
	}
	const (
		addP50 = iota
		addP99
		burstRate
		pluginCPU
		start
	)
	tests := []struct {
		name   string
		change func(r *report)
		want   [5]bool
	}{
		{name: "all but p99", change: func(*report) {}, want: [5]bool{true, false, true, true, true}},
		{name: "ADD p50 just over 0.6×", change: func(r *report) { r.sides[0].add = ms(1, 2.5, 3) },
			want: [5]bool{false, true, true, true, true}},
		{name: "burst 1.4× the reference's", change: func(r *report) { r.sides[0].burst.addWall = 143 * time.Millisecond },
			want: [5]bool{true, false, false, true, true}},
		{name: "one failed ADD fails the burst however fast", change: func(r *report) { r.sides[0].burst.addOK = 127 },
			want: [5]bool{true, false, false, true, true}},
		{name: "plugin CPU over half the reference's", change: func(r *report) { r.sides[0].addCPU = ms(2, 2, 2) },
			want: [5]bool{true, false, true, false, true}},
		{name: "start 1.6× the hello world's", change: func(r *report) { r.sides[0].execFloor = ms(1.6, 1.6, 1.6) },
			want: [5]bool{true, false, true, true, false}},
		{name: "no hello world measured passes no start", change: func(r *report) { r.hello = nil },
			want: [5]bool{true, false, true, true, false}},
		{name: "no reference measured passes no relative target", change: func(r *report) { r.sides = r.sides[:1] },
			want: [5]bool{false, false, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReport()
			tt.change(r)
			got := r.targets()
			if len(got) != len(tt.want) {
				t.Fatalf("%d targets, want %d", len(got), len(tt.want))
			}
			for i, tg := range got {
				if tg.Pass != tt.want[i] {
					t.Errorf("%s (measured %s): pass = %v, want %v", tg.Name, tg.Measured, tg.Pass, tt.want[i])
				}
			}
		})
	}
}

func TestSectionShowsStartAgainstHelloWorld(t *testing.T) {
	ms := func(x float64) []time.Duration { return []time.Duration{time.Duration(x * float64(time.Millisecond))} }
	r := &report{cfg: config{n: 1, burst: 1}, hello: &hello{execFloor: ms(2), execCPU: ms(1)}, sizes: binSizes{lockstep: 22e6, hello: 1.4e6}, sides: []*side{
		{name: "lockstep", key: lockstepKey, execFloor: ms(5), execCPU: ms(4)},
		{name: referenceName, key: referenceKey, execFloor: ms(3), execCPU: ms(2)},
	}}
	sec := r.section()
	for _, want := range []string{
		"| wall p50 | 5.00 ms | 3.00 ms | 2.00 ms |",
		"| binary size | 22.0 MB | – | 1.4 MB |",
		"- lockstep starts in 2.50× the hello world's wall time, 4.00× its CPU.",
		"5.00 ms vs 2.00 ms (2.50×; CPU 4.00×) | **FAIL** |",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
}
