//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/test/benchkit"
)

// verdictMetrics are BenchmarkPrivilegedServiceVerdict's groups and the metrics of
// each the report shows, in its order: per case the median per-run time
// (CASE-p50-ns) and, for each case after a group's first, the median of
// its time minus the first case's in the same round (CASE-added-p50-ns).
var verdictMetrics = []struct{ group, metric string }{
	{"established", "untranslated-p50-ns"},
	{"established", "translated-p50-ns"},
	{"established", "translated-added-p50-ns"},
	{"established", "same-port-p50-ns"},
	{"established", "same-port-added-p50-ns"},
	{"reply", "untranslated-p50-ns"},
	{"reply", "translated-p50-ns"},
	{"reply", "translated-added-p50-ns"},
	{"new", "untranslated-p50-ns"},
	{"new", "backends=1-p50-ns"},
	{"new", "backends=1-added-p50-ns"},
	{"new", "backends=100-p50-ns"},
	{"new", "backends=100-added-p50-ns"},
}

// verdictKey names one metric of one group.
type verdictKey struct{ group, metric string }

// verdictResult is every count's value of each metric.
type verdictResult struct {
	runs, count int
	values      map[verdictKey][]float64
}

// median is the median of k's values over the counts.
func (v *verdictResult) median(k verdictKey) float64 {
	s := slices.Clone(v.values[k])
	slices.Sort(s)
	return s[len(s)/2]
}

// span is the smallest and largest of k's values.
func (v *verdictResult) span(k verdictKey) (lo, hi float64) {
	return slices.Min(v.values[k]), slices.Max(v.values[k])
}

// benchVerdict runs agent/datapath's BenchmarkPrivilegedServiceVerdict count times
// (go test -count) with runs runs per case and returns its metrics.
func benchVerdict(ctx context.Context, repoRoot string, runs, count int) (*verdictResult, error) {
	out, err := benchkit.GoTestBench(ctx, repoRoot, "./agent/datapath/", "^BenchmarkPrivilegedServiceVerdict$",
		"-benchtime", fmt.Sprintf("%dx", runs), "-count", strconv.Itoa(count))
	if err != nil {
		return nil, err
	}
	values, err := parseVerdicts(out)
	if err != nil {
		return nil, err
	}
	res := &verdictResult{runs: runs, count: count, values: values}
	for _, m := range verdictMetrics {
		k := verdictKey(m)
		if got := len(values[k]); got != count {
			return nil, fmt.Errorf("go test printed %s of BenchmarkPrivilegedServiceVerdict/%s %d times, want %d; output:\n%s", k.metric, k.group, got, count, out.String())
		}
	}
	for _, g := range []string{"established", "reply"} {
		k := verdictKey{g, "translated-added-p50-ns"}
		lo, hi := res.span(k)
		logf("  %s: translation adds %.0f ns (median of %d; %.0f-%.0f)", g, res.median(k), count, lo, hi)
	}
	return res, nil
}

// parseVerdicts reads `go test -bench` output and returns, for every
// BenchmarkPrivilegedServiceVerdict/GROUP line, each custom metric's value, one per
// line in the order printed, e.g.
//
//	BenchmarkPrivilegedServiceVerdict/reply-2   2000   2942 ns/op   30.00 translated-added-p50-ns   130.9 translated-ns ...
func parseVerdicts(r io.Reader) (map[verdictKey][]float64, error) {
	got := map[verdictKey][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		group, ok := strings.CutPrefix(fields[0], "BenchmarkPrivilegedServiceVerdict/")
		if !ok {
			continue
		}
		// Drop the -GOMAXPROCS suffix go test adds when it is not 1.
		if i := strings.LastIndexByte(group, '-'); i > 0 {
			if _, err := strconv.Atoi(group[i+1:]); err == nil {
				group = group[:i]
			}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			if !strings.HasSuffix(fields[i+1], "-ns") {
				continue
			}
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("parse %q: %s: %w", sc.Text(), fields[i+1], err)
			}
			k := verdictKey{group, fields[i+1]}
			got[k] = append(got[k], v)
		}
	}
	return got, sc.Err()
}
