//go:build linux

package main

import (
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/iptables"
)

func TestParseVerdicts(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: lockstep.dev/lockstep/agent/datapath
cpu: AMD EPYC
BenchmarkPrivilegedVerdict/rules=100/deny-2         	  200000	       398.1 ns/op	       392.0 ns/verdict
BenchmarkPrivilegedVerdict/rules=100/allow-new-2    	  200000	      4689 ns/op	      1182 ns/verdict
BenchmarkPrivilegedVerdict/rules=10000/ct-hit       	  200000	       225.1 ns/op	       220.5 ns/verdict
BenchmarkPrivilegedVerdictFloor/repeat-2            	  200000	        36.22 ns/op	        34.00 ns/verdict
BenchmarkPrivilegedVerdictFloor/single-2            	  200000	      6590 ns/op	       101.4 ns/verdict
BenchmarkPrivilegedVerdictFloor/ct-insert-2         	  200000	       415.0 ns/op	       383.0 ns/verdict
BenchmarkPrivilegedApplyRuleChange-2                	     100	    512345 ns/op
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
		ctInsertKey:        383,
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
	_, err := parseVerdicts(strings.NewReader("BenchmarkPrivilegedVerdict/rules=100/deny-2  10  1 ns/op  x ns/verdict\n"))
	if err == nil {
		t.Fatal("want an error for an unparsable metric")
	}
}

func TestParseIPTScale(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkPrivilegedApplyOneChange/mode=nft/change=rule-2   20   35022790 ns/op   105296 entries   50590 rules   3290 sets\n" +
		"BenchmarkPrivilegedApplyOneChange/mode=legacy/change=rule-2   20   235022790 ns/op   105296 entries   50590 rules   3290 sets\n" +
		"PASS\n"
	got, err := parseIPTScale(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []iptScale{
		{mode: iptables.ModeNFT, perOp: 35022790, rules: 50590, sets: 3290, members: 105296},
		{mode: iptables.ModeLegacy, perOp: 235022790, rules: 50590, sets: 3290, members: 105296},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for name, bad := range map[string]string{
		"no line":        "PASS\n",
		"metric missing": "BenchmarkPrivilegedApplyOneChange/mode=nft/change=rule-2 20 5 ns/op 3 rules\n",
	} {
		if _, err := parseIPTScale(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
}
