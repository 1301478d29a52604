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

	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
)

// nsPrefix names every namespace policybench creates (policybench-PID-N).
const nsPrefix = "policybench"

// config is what the command line asks for.
type config struct {
	out          string
	binDir       string
	edits        int
	verdictRuns  int
	iperfSeconds int
	iperfRounds  int
	iperfPin     bool
	// dataplanes runs the eBPF-versus-iptables comparison, dpEdits
	// edits per cell; only, when set, runs that one section alone.
	dataplanes bool
	dpEdits    int
	only       string

	// args are the flags as given, kept to record the exact command.
	args []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("policybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sudo go run ./tools/policybench [flags]   (or: make bench)")
		fmt.Fprintln(stderr, "Benchmarks lockstep's policy dataplane (verdict cost, policy change latency, throughput, agent memory) in throwaway network namespaces.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", "", "markdown file whose policybench section is (re)written; empty prints the section to stdout")
	fs.StringVar(&c.binDir, "bin", "bin", "directory holding lockstep and the lockstep-cni symlink (make build)")
	fs.IntVar(&c.edits, "edits", 200, "timed policy edits")
	fs.IntVar(&c.verdictRuns, "verdict-runs", 200000, "BPF_PROG_TEST_RUN repetitions per verdict benchmark (go test -benchtime Nx)")
	fs.IntVar(&c.iperfSeconds, "iperf-seconds", 5, "length of each iperf3 run")
	fs.IntVar(&c.iperfRounds, "iperf-rounds", 5, "iperf3 rounds, each one run with lockstep's programs, one with a pass-through program and one with no filter, interleaved; the medians count")
	fs.BoolVar(&c.iperfPin, "iperf-pin", false, "pin the iperf3 client and server to CPUs 0 and 1 (on a quiet machine of two or more CPUs: it steadies the runs; on a busy one it makes them wait for a CPU)")
	fs.BoolVar(&c.dataplanes, "dataplanes", true, "compare the eBPF and iptables (nft) dataplanes: change latency at 100/1k/10k pods, 640 policies from scratch")
	fs.IntVar(&c.dpEdits, "dp-edits", 100, "timed policy edits per dataplane and pod count in the dataplane comparison")
	fs.StringVar(&c.only, "only", "", `run only this section: "dataplanes", or "change", "rss" or "throughput", which print their results and write no report (empty runs everything)`)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: policybench takes only flags", fs.Args())
	}
	switch {
	case c.edits < 2:
		return c, fmt.Errorf("-edits %d: need at least two", c.edits)
	case c.verdictRuns < 1:
		return c, fmt.Errorf("-verdict-runs %d: need at least one", c.verdictRuns)
	case c.iperfSeconds < 1 || c.iperfRounds < 1:
		return c, errors.New("-iperf-seconds and -iperf-rounds must be at least 1")
	case c.dpEdits < 2:
		return c, fmt.Errorf("-dp-edits %d: need at least two", c.dpEdits)
	case c.only != "" && c.only != "dataplanes" && c.only != "change" && c.only != "rss" && c.only != "throughput":
		return c, fmt.Errorf("-only %q: the sections that run alone are dataplanes, change, rss and throughput", c.only)
	case c.only != "" && c.only != "dataplanes" && c.out != "":
		return c, fmt.Errorf("-only %s writes no report: drop -out, or run every section to rewrite %s", c.only, c.out)
	case c.only == "dataplanes" && !c.dataplanes:
		return c, errors.New("-only dataplanes contradicts -dataplanes=false")
	}
	c.args = args
	return c, nil
}

// run is the whole command; it returns the exit status. Cleanup runs before
// it returns, whatever happened.
func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if status, ok := benchkit.Preflight("policybench", "it creates network namespaces, veth pairs and bpffs mounts", err, stderr); !ok {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	b := &bench{cfg: cfg}
	var cleanErr error
	rep, runErr := func() (*report, error) {
		// Deferred, so that even a panic removes what the run created.
		defer func() { cleanErr = b.cleanup() }()
		return b.run(ctx)
	}()
	if cleanErr != nil {
		fmt.Fprintln(stderr, "policybench: clean up:", cleanErr)
	}
	if runErr != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "policybench: interrupted; nothing was written")
			return 130
		}
		fmt.Fprintln(stderr, "policybench:", runErr)
		return 1
	}
	if rep == nil {
		// -only change, rss or throughput: the results were printed as measured.
		return exitStatus(cleanErr)
	}
	if err := rep.write(cfg.out, os.Stdout); err != nil {
		fmt.Fprintln(stderr, "policybench:", err)
		return 1
	}
	if cfg.out != "" {
		logf("wrote %s", cfg.out)
	}
	return exitStatus(cleanErr)
}

// exitStatus is run's status once everything measured was reported: 1 if
// the clean-up failed.
func exitStatus(cleanErr error) int {
	if cleanErr != nil {
		return 1
	}
	return 0
}

// bench is one run: its configuration, work directory and what must be
// undone at the end, in reverse order.
type bench struct {
	cfg      config
	binDir   string // absolute
	work     string
	cleanups []func() error
}

// onCleanup registers fn to run at the end of the run, before the
// functions registered earlier.
func (b *bench) onCleanup(fn func() error) { b.cleanups = append(b.cleanups, fn) }

// cleanup undoes everything the run created, newest first.
func (b *bench) cleanup() error {
	var errs []error
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, b.cleanups[i]())
	}
	b.cleanups = nil
	return errors.Join(errs...)
}

// newNetns creates a namespace that is deleted at the end of the run.
func (b *bench) newNetns() (ns.NetNS, error) {
	n, err := nodesim.Create(nodesim.Name(nsPrefix))
	if err != nil {
		return nil, err
	}
	b.onCleanup(func() error { return nodesim.Delete(n) })
	return n, nil
}

// run measures everything, in the order least to most likely to fail on
// an unusual machine, and returns the report.
func (b *bench) run(ctx context.Context) (*report, error) {
	if n, _ := nodesim.SweepStale(nsPrefix); n > 0 {
		logf("removed %d namespaces left by an interrupted run", n)
	}
	root, err := benchkit.FindRepoRoot()
	if err != nil {
		return nil, err
	}
	if b.binDir, err = filepath.Abs(b.cfg.binDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(b.binDir, "lockstep-cni")); err != nil {
		return nil, fmt.Errorf("find the plugin: %w (run make build first, or pass -bin)", err)
	}
	if b.work, err = os.MkdirTemp("", "policybench-"); err != nil {
		return nil, err
	}
	b.onCleanup(func() error { return os.RemoveAll(b.work) })

	rep := &report{cfg: b.cfg, facts: gatherFacts(b.cfg, b.binDir, benchkit.LoadAverage())}
	c := benchcluster.New()
	logf("cluster: %d namespaces, %d remote pods, %d policies, %d local endpoints",
		len(c.Namespaces), len(c.Pods), len(c.Policies), benchcluster.LocalEndpoints)

	switch b.cfg.only {
	case "dataplanes":
		return rep, b.runDataplanes(ctx, rep)
	case "change":
		logf("policy change → maps applied: %d edits", b.cfg.edits)
		res, err := b.benchPolicyChange(ctx, c, b.cfg.edits)
		if err != nil {
			return nil, fmt.Errorf("policy change benchmark: %w", err)
		}
		fmt.Print(res.table())
		return nil, ctx.Err()
	case "rss":
		logf("agent memory with the cluster loaded")
		if _, err := b.benchRSS(ctx, c); err != nil {
			return nil, fmt.Errorf("agent memory: %w", err)
		}
		return nil, ctx.Err()
	case "throughput":
		logf("TCP throughput between two pods, policy on and off")
		if _, err := b.benchThroughput(ctx); err != nil {
			return nil, fmt.Errorf("throughput benchmark: %w", err)
		}
		return nil, ctx.Err()
	}
	logf("policy change → maps applied: %d edits", b.cfg.edits)
	if rep.change, err = b.benchPolicyChange(ctx, c, b.cfg.edits); err != nil {
		return nil, fmt.Errorf("policy change benchmark: %w", err)
	}
	logf("per-packet verdict: go test -bench Verdict ./agent/datapath")
	if rep.verdicts, err = benchVerdict(ctx, root, b.cfg.verdictRuns); err != nil {
		return nil, fmt.Errorf("verdict benchmark: %w", err)
	}
	logf("agent memory with the cluster loaded")
	if rep.rss, err = b.benchRSS(ctx, c); err != nil {
		return nil, fmt.Errorf("agent memory: %w", err)
	}
	logf("TCP throughput between two pods, policy on and off")
	if rep.iperf, err = b.benchThroughput(ctx); err != nil {
		return nil, fmt.Errorf("throughput benchmark: %w", err)
	}
	if b.cfg.dataplanes {
		if err := b.runDataplanes(ctx, rep); err != nil {
			return nil, err
		}
	}
	return rep, ctx.Err()
}

// runDataplanes runs the eBPF-versus-iptables comparison into rep.
func (b *bench) runDataplanes(ctx context.Context, rep *report) error {
	logf("dataplanes: eBPF versus iptables (%s), %d edits per pod count", "nft", b.cfg.dpEdits)
	var err error
	if rep.dataplanes, err = b.benchDataplanes(ctx, b.cfg.dpEdits); err != nil {
		return fmt.Errorf("dataplane comparison: %w", err)
	}
	root, err := benchkit.FindRepoRoot()
	if err != nil {
		return err
	}
	logf("iptables: one change with ~50k rules loaded (agent/iptables BenchmarkPrivilegedApplyOneChange)")
	if rep.dataplanes.atScale, err = benchIPTablesAtScale(ctx, root); err != nil {
		return fmt.Errorf("iptables at scale: %w", err)
	}
	return ctx.Err()
}

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "policybench: "+format+"\n", args...)
}
