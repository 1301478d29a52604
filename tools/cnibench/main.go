//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"lockstep.dev/lockstep/test/benchkit"
)

// nsPrefix names every namespace cnibench creates (cnibench-PID-N).
const nsPrefix = "cnibench"

// config is what the command line asks for.
type config struct {
	out        string
	n          int
	warmup     int
	burst      int
	binDir     string
	refPlugins string
	workDir    string

	// args are the flags as given, kept to record the exact command.
	args []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cnibench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sudo go run ./tools/cnibench [flags]   (or: make bench)")
		fmt.Fprintln(stderr, "Benchmarks lockstep's CNI ADD/DEL against ptp + host-local in throwaway network namespaces.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", "", "markdown file whose cnibench section is (re)written; empty or - prints the section to stdout")
	fs.IntVar(&c.n, "n", 300, "timed sequential ADD+DEL iterations per plugin")
	fs.IntVar(&c.warmup, "warmup", 20, "untimed ADD+DEL iterations per plugin before the timed ones")
	fs.IntVar(&c.burst, "burst", 128, "pods ADDed at once in the burst")
	fs.StringVar(&c.binDir, "bin", "", "directory holding lockstep and the lockstep-cni symlink (e.g. bin after make build); empty builds a fresh binary")
	fs.StringVar(&c.refPlugins, "ref-plugins", "/usr/lib/cni", "directory of the reference plugins ptp and host-local")
	fs.StringVar(&c.workDir, "work", "", "parent of the temporary work directory (agent state, host-local data); empty means $TMPDIR or /tmp. Use a real disk, not tmpfs")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: cnibench takes only flags", fs.Args())
	}
	switch {
	case c.n < 1:
		return c, fmt.Errorf("-n %d: need at least one timed iteration", c.n)
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup %d: cannot be negative", c.warmup)
	case c.burst < 1:
		return c, fmt.Errorf("-burst %d: need at least one pod", c.burst)
	}
	if c.out == "-" {
		c.out = ""
	}
	c.args = args
	return c, nil
}

// run is the whole command; it returns the exit status. Cleanup runs before
// it returns, whatever happened.
func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if status, ok := benchkit.Preflight("cnibench", "it creates network namespaces and veth pairs", err, stderr); !ok {
		return status
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer func() {
		signal.Stop(sigc)
		close(sigc)
	}()
	go func() {
		sig, ok := <-sigc
		if !ok {
			return
		}
		logf("%v: stopping; removing namespaces, agent and temporary files", sig)
		cancel()
		// Later signals are swallowed so that cleanup can finish; namespaces
		// of a run killed outright are swept by the next one.
		for sig := range sigc {
			logf("%v: still cleaning up, please wait", sig)
		}
	}()

	b := &bench{cfg: cfg}
	var cleanErr error
	rep, runErr := func() (*report, error) {
		// Deferred, so that even a panic removes what the run created.
		defer func() { cleanErr = b.cleanup() }()
		return b.run(ctx)
	}()
	if cleanErr != nil {
		fmt.Fprintln(stderr, "cnibench: clean up:", cleanErr)
	}
	if rep != nil {
		if err := rep.write(cfg.out, os.Stdout); err != nil {
			fmt.Fprintln(stderr, "cnibench:", err)
			return 1
		}
		if cfg.out != "" {
			logf("wrote %s", cfg.out)
		}
	}
	switch {
	case runErr != nil && ctx.Err() != nil:
		fmt.Fprintln(stderr, "cnibench: interrupted; nothing was written")
		return 130
	case runErr != nil:
		fmt.Fprintln(stderr, "cnibench:", runErr)
		return 1
	case cleanErr != nil:
		return 1
	}
	return 0
}

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cnibench: "+format+"\n", args...)
}
