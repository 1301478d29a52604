//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/test/benchkit"
)

// iptScaleRuns is how many changes BenchmarkPrivilegedApplyOneChange times per mode.
const iptScaleRuns = 20

// iptScale is one mode's result of agent/iptables's BenchmarkPrivilegedApplyOneChange
// (change=rule): the mean Apply of one port-range change with its state
// of 640 endpoints (~50k rules) loaded.
type iptScale struct {
	mode    iptables.Mode
	perOp   time.Duration
	rules   int
	sets    int
	members int
}

// benchIPTablesAtScale runs BenchmarkPrivilegedApplyOneChange/mode=*/change=rule as
// `go test` would, in the netns the benchmark creates itself.
func benchIPTablesAtScale(ctx context.Context, repoRoot string) ([]iptScale, error) {
	out, err := benchkit.GoTestBench(ctx, repoRoot, "./agent/iptables/", "^BenchmarkPrivilegedApplyOneChange$/^mode=/^change=rule$", "-benchtime", fmt.Sprintf("%dx", iptScaleRuns))
	if err != nil {
		return nil, err
	}
	res, err := parseIPTScale(out)
	if err != nil {
		return nil, fmt.Errorf("%w; go test printed:\n%s", err, out.String())
	}
	for _, r := range res {
		logf("  %s, %d rules loaded: one change %s (mean of %d)", r.mode, r.rules, r.perOp, iptScaleRuns)
	}
	return res, nil
}

// parseIPTScale reads lines such as
//
//	BenchmarkPrivilegedApplyOneChange/mode=nft/change=rule-2   20   35022790 ns/op   105296 entries   50590 rules   3290 sets
func parseIPTScale(r io.Reader) ([]iptScale, error) {
	var out []iptScale
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		name, ok := strings.CutPrefix(f0(f), "BenchmarkPrivilegedApplyOneChange/mode=")
		if !ok {
			continue
		}
		word, _, ok := strings.Cut(name, "/change=rule")
		if !ok {
			continue
		}
		mode, err := iptables.ParseMode(word)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		s := iptScale{mode: mode}
		seen := 0
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("parse %q: %w", sc.Text(), err)
			}
			switch f[i+1] {
			case "ns/op":
				s.perOp, seen = time.Duration(v), seen+1
			case "rules":
				s.rules, seen = int(v), seen+1
			case "sets":
				s.sets, seen = int(v), seen+1
			case "entries":
				s.members, seen = int(v), seen+1
			}
		}
		if seen != 4 {
			return nil, fmt.Errorf("parse %q: want ns/op, rules, sets and entries", sc.Text())
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("go test printed no BenchmarkPrivilegedApplyOneChange/mode=*/change=rule line")
	}
	return out, nil
}

func f0(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
