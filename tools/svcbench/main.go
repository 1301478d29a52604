//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"
)

// nsPrefix names the network namespaces svcbench creates itself
// (svcbench-PID-N); the real-node cluster's are realnode's.
const nsPrefix = "svcbench"

// The parts of a run, in the order they run: least to most likely to fail
// on an unusual machine.
const (
	partChange   = "change"
	partVerdict  = "verdict"
	partConnRate = "connrate"
)

// config is what the command line asks for.
type config struct {
	out          string
	binDir       string
	rounds       int
	seconds      int
	workers      int
	changes      int
	verdictRuns  int
	verdictCount int
	// only, when set, runs that part alone, prints its results and
	// writes no report.
	only string

	// args are the flags as given, kept to record the exact command.
	args []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("svcbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sudo go run ./tools/svcbench [flags]   (or: make bench)")
		fmt.Fprintln(stderr, "Benchmarks lockstep's Service translation: Service changes until applied, per-packet cost, and the connection rate to a ClusterIP on a real cluster against kube-proxy.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", "", "markdown file whose svcbench section is (re)written; empty prints it to stdout")
	fs.StringVar(&c.binDir, "bin", "bin", "directory holding the lockstep binary whose version is recorded")
	fs.IntVar(&c.rounds, "rounds", 12, "connection-rate rounds, each measuring every mode (lockstep, kube-proxy, kube-proxy with kernel routing) in turn")
	fs.IntVar(&c.seconds, "seconds", 3, "length of each connection-rate measurement (shorter when its 7000 source ports are used up first)")
	fs.IntVar(&c.workers, "workers", 8, "connections the client opens at a time")
	fs.IntVar(&c.changes, "changes", 200, "timed Service changes, spaced and back to back each")
	fs.IntVar(&c.verdictRuns, "verdict-runs", 20000, "BPF_PROG_TEST_RUN runs per case of BenchmarkPrivilegedServiceVerdict (go test -benchtime Nx)")
	fs.IntVar(&c.verdictCount, "verdict-count", 8, "times BenchmarkPrivilegedServiceVerdict runs (go test -count); the medians count")
	fs.StringVar(&c.only, "only", "", `run only this part, print its results and write no report: "change", "verdict" or "connrate"`)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: svcbench takes only flags", fs.Args())
	}
	switch {
	case c.rounds < 1 || c.seconds < 1 || c.workers < 1:
		return c, errors.New("-rounds, -seconds and -workers must be at least 1")
	case c.changes < 2:
		return c, fmt.Errorf("-changes %d: need at least two", c.changes)
	case c.verdictRuns < 1 || c.verdictCount < 1:
		return c, errors.New("-verdict-runs and -verdict-count must be at least 1")
	case c.only != "" && c.only != partChange && c.only != partVerdict && c.only != partConnRate:
		return c, fmt.Errorf("-only %q: the parts are %s, %s and %s", c.only, partChange, partVerdict, partConnRate)
	case c.only != "" && c.out != "":
		return c, fmt.Errorf("-only %s writes no report: drop -out, or run every part to rewrite %s", c.only, c.out)
	}
	c.args = args
	return c, nil
}

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s svcbench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if status, ok := benchkit.Preflight("svcbench", "it creates network namespaces and a cluster in them", err, stderr); !ok {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The machine and source tree as measured: the tree may change during
	// the run.
	binDir, _ := filepath.Abs(cfg.binDir)
	machine := benchkit.GatherMachine("tools/svcbench", cfg.args, binDir, benchkit.LoadAverage())
	rep, err := measure(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "svcbench: interrupted; nothing was written")
			return 130
		}
		fmt.Fprintln(stderr, "svcbench:", err)
		return 1
	}
	if cfg.only != "" {
		fmt.Fprint(stdout, rep.partText(cfg.only))
		return 0
	}
	rep.machine = machine
	if err := fileSection.Write(cfg.out, rep.section(), stdout); err != nil {
		fmt.Fprintln(stderr, "svcbench:", err)
		return 1
	}
	if cfg.out != "" {
		logf("wrote %s", cfg.out)
	}
	return 0
}

// measure runs the parts cfg asks for.
func measure(ctx context.Context, cfg config) (*report, error) {
	if n, _ := nodesim.SweepStale(nsPrefix); n > 0 {
		logf("removed %d namespaces left by an interrupted run", n)
	}
	root, err := benchkit.FindRepoRoot()
	if err != nil {
		return nil, err
	}
	rep := &report{cfg: cfg}
	want := func(part string) bool { return cfg.only == "" || cfg.only == part }
	if want(partChange) {
		logf("Service change → applied: %d changes with %d Services loaded, spaced then back to back", cfg.changes, benchcluster.Namespaces*benchcluster.Apps)
		if rep.change, err = benchServiceChange(ctx, cfg.changes); err != nil {
			return nil, fmt.Errorf("Service change benchmark: %w", err)
		}
	}
	if want(partVerdict) {
		logf("per-packet cost: go test -bench BenchmarkPrivilegedServiceVerdict ./agent/datapath (%d times)", cfg.verdictCount)
		if rep.verdict, err = benchVerdict(ctx, root, cfg.verdictRuns, cfg.verdictCount); err != nil {
			return nil, fmt.Errorf("per-packet benchmark: %w", err)
		}
	}
	if want(partConnRate) {
		logf("connection rate on the real-node cluster: %d rounds of %d s per measurement", cfg.rounds, cfg.seconds)
		if rep.conn, err = benchConnRate(ctx, cfg); err != nil {
			return nil, fmt.Errorf("connection-rate benchmark: %w", err)
		}
	}
	return rep, ctx.Err()
}
