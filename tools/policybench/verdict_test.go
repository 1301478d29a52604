//go:build linux

package main

import (
	"strings"
	"testing"
)

func TestParseVerdicts(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: lockstep.dev/lockstep/agent/datapath
cpu: AMD EPYC
BenchmarkVerdict/rules=100/deny-2         	  200000	       398.1 ns/op	       392.0 ns/verdict
BenchmarkVerdict/rules=100/allow-new-2    	  200000	      4689 ns/op	      1182 ns/verdict
BenchmarkVerdict/rules=10000/ct-hit       	  200000	       225.1 ns/op	       220.5 ns/verdict
BenchmarkVerdictFloor/repeat-2            	  200000	        36.22 ns/op	        34.00 ns/verdict
BenchmarkVerdictFloor/single-2            	  200000	      6590 ns/op	       101.4 ns/verdict
BenchmarkApplyRuleChange-2                	     100	    512345 ns/op
PASS
ok  	lockstep.dev/lockstep/agent/datapath	7.743s
`
	got, err := parseVerdicts(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[verdictKey]float64{
		{100, "deny"}:      392,
		{100, "allow-new"}: 1182,
		{10000, "ct-hit"}:  220.5,
		{0, "repeat"}:      34,
		{0, "single"}:      101.4,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%+v: got %v, want %v", k, got[k], v)
		}
	}
}

func TestParseVerdictsBadNumber(t *testing.T) {
	_, err := parseVerdicts(strings.NewReader("BenchmarkVerdict/rules=100/deny-2  10  1 ns/op  x ns/verdict\n"))
	if err == nil {
		t.Fatal("want an error for an unparsable metric")
	}
}
