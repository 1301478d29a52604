//go:build linux

package main

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/benchkit"
)

func TestSpliceSection(t *testing.T) {
	section := beginMarker + "\nNEW\n" + endMarker + "\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"no file gets the intro", "", fileIntro + "\n" + section},
		{"other sections survive a rerun",
			"# B\n\nbefore\n" + beginMarker + "\nOLD\n" + endMarker + "\nafter\n",
			"# B\n\nbefore\n" + section + "after\n"},
		{"a file without the section gets it appended", "# B\n\nother tool\n\n\n", "# B\n\nother tool\n\n" + section},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spliceSection([]byte(tc.old), section)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestSpliceSectionRefusesBrokenMarkers(t *testing.T) {
	for _, old := range []string{
		"# B\n" + beginMarker + "\nno end\n",
		"# B\n" + endMarker + "\n" + beginMarker + "\n",
	} {
		if _, err := spliceSection([]byte(old), "x"); err == nil {
			t.Errorf("spliceSection(%q) succeeded; want an error", old)
		}
	}
}

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
		if tg.pass != want[i] {
			t.Errorf("%s (measured %s): pass = %v, want %v", tg.name, tg.measured, tg.pass, want[i])
		}
	}

	r.sides[0].burst.addOK = 127 // one failed ADD fails the burst target however fast
	if tg := r.targets()[3]; tg.pass {
		t.Errorf("burst with a failed ADD passed: %s", tg.measured)
	}
}
