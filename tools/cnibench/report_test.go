//go:build linux

package main

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/benchkit"
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
	r := &report{sides: []*side{
		{key: lockstepKey, add: ms(1, 1.5, 12), burst: burstResult{pods: 128, addOK: 128, delOK: 128, addWall: 200 * time.Millisecond}},
		{key: referenceKey, add: ms(4, 4, 4)},
	}}
	want := []bool{true, false, true, true} // p50 1.5 ms; p99 12 ms; 1.5 vs 4; 640 pods/s
	for i, tg := range r.targets() {
		if tg.Pass != want[i] {
			t.Errorf("%s (measured %s): pass = %v, want %v", tg.Name, tg.Measured, tg.Pass, want[i])
		}
	}

	r.sides[0].burst.addOK = 127 // one failed ADD fails the burst target however fast
	if tg := r.targets()[3]; tg.Pass {
		t.Errorf("burst with a failed ADD passed: %s", tg.Measured)
	}
}
