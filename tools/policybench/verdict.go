//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/test/benchkit"
)

// verdictCases are BenchmarkPrivilegedVerdict's sub-benchmarks per rule count, in
// the order the table shows them.
var verdictCases = []string{"deny", "allow-new", "ct-hit", "ct-table", "ct-reply"}

// verdictRuleCounts are the rule counts BenchmarkPrivilegedVerdict runs with.
var verdictRuleCounts = []int{100, 1000, 10000}

// verdictKey names one measurement of BenchmarkPrivilegedVerdict, or with rules 0
// one of BenchmarkPrivilegedVerdictFloor (kase repeat or single).
type verdictKey struct {
	rules int
	kase  string // one of verdictCases; repeat or single
}

// ctInsertKey is BenchmarkPrivilegedVerdictFloor/ct-insert: a conntrack insert
// alone, under the repeat harness.
var ctInsertKey = verdictKey{0, "ct-insert"}

// floorKey is the BenchmarkPrivilegedVerdictFloor measurement of the harness kase
// runs under: allow-new and ct-table cannot use the kernel's repeat (the
// second run would hit the connection, or the flow cache entry, the first
// created), the others do.
func floorKey(kase string) verdictKey {
	if kase == "allow-new" || kase == "ct-table" {
		return verdictKey{0, "single"}
	}
	return verdictKey{0, "repeat"}
}

// benchVerdict runs agent/datapath's BenchmarkPrivilegedVerdict (10k identities,
// 100/1k/10k rules) and BenchmarkPrivilegedVerdictFloor as `go test` would and
// returns ns/verdict per case.
func benchVerdict(ctx context.Context, repoRoot string, runs int) (map[verdictKey]float64, error) {
	out, err := benchkit.GoTestBench(ctx, repoRoot, "./agent/datapath/", "^BenchmarkPrivilegedVerdict(Floor)?$", "-benchtime", fmt.Sprintf("%dx", runs))
	if err != nil {
		return nil, err
	}
	got, err := parseVerdicts(out)
	if err != nil {
		return nil, err
	}
	for _, k := range []verdictKey{floorKey("deny"), floorKey("allow-new"), ctInsertKey} {
		if _, ok := got[k]; !ok {
			return nil, fmt.Errorf("go test printed no ns/verdict for BenchmarkPrivilegedVerdictFloor/%s; output:\n%s", k.kase, out.String())
		}
		logf("  floor %s: %.0f ns/verdict", k.kase, got[k])
	}
	for _, n := range verdictRuleCounts {
		for _, c := range verdictCases {
			if _, ok := got[verdictKey{n, c}]; !ok {
				return nil, fmt.Errorf("go test printed no ns/verdict for rules=%d/%s; output:\n%s", n, c, out.String())
			}
			logf("  rules=%d %s: %.0f ns/verdict (%.0f above the floor)", n, c, got[verdictKey{n, c}], got[verdictKey{n, c}]-got[floorKey(c)])
		}
	}
	return got, nil
}

// parseVerdicts reads `go test -bench` output and returns the ns/verdict
// metric of every BenchmarkPrivilegedVerdict/rules=N/CASE and
// BenchmarkPrivilegedVerdictFloor/HARNESS line, e.g.
//
//	BenchmarkPrivilegedVerdict/rules=100/deny-2   200000   398.1 ns/op   392.0 ns/verdict
//	BenchmarkPrivilegedVerdictFloor/repeat-2      200000    36.2 ns/op    34.0 ns/verdict
func parseVerdicts(r io.Reader) (map[verdictKey]float64, error) {
	got := map[verdictKey]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		var rulesText, kase string
		if name, ok := strings.CutPrefix(fields[0], "BenchmarkPrivilegedVerdict/rules="); ok {
			if rulesText, kase, ok = strings.Cut(name, "/"); !ok {
				continue
			}
		} else if kase, ok = strings.CutPrefix(fields[0], "BenchmarkPrivilegedVerdictFloor/"); ok {
			rulesText = "0"
		} else {
			continue
		}
		// Drop the -GOMAXPROCS suffix go test adds when it is not 1.
		if i := strings.LastIndexByte(kase, '-'); i > 0 {
			if _, err := strconv.Atoi(kase[i+1:]); err == nil {
				kase = kase[:i]
			}
		}
		rules, err := strconv.Atoi(rulesText)
		if err != nil {
			return nil, fmt.Errorf("parse %q: rule count: %w", sc.Text(), err)
		}
		for i := 2; i+1 < len(fields); i += 2 {
			if fields[i+1] != "ns/verdict" {
				continue
			}
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("parse %q: ns/verdict: %w", sc.Text(), err)
			}
			got[verdictKey{rules, kase}] = v
		}
	}
	return got, sc.Err()
}
