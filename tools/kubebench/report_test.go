//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

const sample = `goos: linux
BenchmarkKubePrivilegedPodBurst-2   	       1	13053928133 ns/op	       177.5 ms/add-p50	       511.0 ms/add-p99	        16.00 parallel-adds	      1000 pods	        77.77 pods/s	        12.86 s/burst	        13.05 s/reported	        34.00 writes-total	         8.000 writes:ippools	         4.000 writes:ippools/status	         1.000 writes:leases	         4.000 writes:nodeipams	        17.00 writes:nodeipams/status	3.1 ipam-ms/add-p50	9.5 ipam-ms/add-p99	800 ipam-pods/s	1.25 ipam-s/burst	1.9 ipam-s/reported	3 ipam-writes-total	2 ipam-writes:nodeipams/status	1 ipam-writes:events
PASS
`

func TestParseBenchmark(t *testing.T) {
	r, err := parseBenchmark(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if r.pods != 1000 || r.parallel != 16 || r.cni.burst != 12860*time.Millisecond || r.cni.p99 != 511*time.Millisecond || r.cni.writesTotal != 34 {
		t.Fatalf("parsed %+v", r.cni)
	}
	if r.ipam.burst != 1250*time.Millisecond || r.ipam.p50 != 3100*time.Microsecond || r.ipam.writesTotal != 3 {
		t.Fatalf("parsed %+v", r.ipam)
	}
	if got := r.cni.writes["nodeipams/status"]; got != 17 || len(r.cni.writes) != 5 || len(r.ipam.writes) != 2 {
		t.Fatalf("writes %v and %v", r.cni.writes, r.ipam.writes)
	}
	section := (&report{res: r}).section()
	for _, want := range []string{
		fileSection.Begin(),
		"| 1000 pods through lockstep-cni on one node ≤ 2.00 s | 12.86 s | **FAIL** |",
		"| 1000 allocations alone on one node ≤ 2.00 s | 1.25 s | PASS |",
		"| nodeipams/status | 17 | 2 |",
		"| events | 0 | 1 |",
		fileSection.End(),
	} {
		if !strings.Contains(section, want) {
			t.Errorf("section lacks %q:\n%s", want, section)
		}
	}
}

func TestParseBenchmarkRefusesIncompleteOutput(t *testing.T) {
	for name, out := range map[string]string{
		"no line":        "PASS\n",
		"metric missing": "BenchmarkKubePrivilegedPodBurst-2 1 5 ns/op 1 pods\n",
		"phase missing":  strings.ReplaceAll(sample, "ipam-s/burst", "other"),
		"bad number":     "BenchmarkKubePrivilegedPodBurst-2 1 x ns/op\n",
	} {
		if _, err := parseBenchmark(strings.NewReader(out)); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
}
