//go:build linux

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

// benchmark is the go test benchmark kubebench runs, and its package.
const (
	benchmark = "BenchmarkKubePrivilegedPodBurst"
	benchPkg  = "./test/twonode/"
)

// config is what the command line asks for.
type config struct {
	out    string
	binDir string
	args   []string // the flags as given, to record the exact command
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("kubebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sudo go run ./tools/kubebench [flags]   (or: make bench)")
		fmt.Fprintln(stderr, "Benchmarks 1000 pod ADDs on one node in Kubernetes mode, with a real API server, in throwaway network namespaces.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", "", "markdown file whose kubebench section is (re)written; empty prints the section to stdout")
	fs.StringVar(&c.binDir, "bin", "bin", "directory holding the lockstep binary whose version is recorded (the benchmark builds its own from the same tree)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: kubebench takes only flags", fs.Args())
	}
	c.args = args
	return c, nil
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if status, ok := benchkit.Preflight("kubebench", "it creates network namespaces", err, stderr); !ok {
		return status
	}
	root, err := benchkit.FindRepoRoot()
	if err != nil {
		fmt.Fprintln(stderr, "kubebench:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The machine and tree are read when the run starts: by its end the
	// tree may have moved on.
	machine := benchkit.GatherMachine("tools/kubebench", cfg.args, cfg.binDir, benchkit.LoadAverage())
	out, err := runBenchmark(ctx, root, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "kubebench:", err)
		return 1
	}
	res, err := parseBenchmark(bytes.NewReader(out))
	if err != nil {
		fmt.Fprintf(stderr, "kubebench: %v; go test printed:\n%s", err, out)
		return 1
	}
	rep := &report{
		machine:   machine,
		apiserver: apiserverVersion(root),
		res:       res,
	}
	if err := fileSection.Write(cfg.out, rep.section(), stdout); err != nil {
		fmt.Fprintln(stderr, "kubebench:", err)
		return 1
	}
	return 0
}

// runBenchmark runs the benchmark once and returns what go test printed.
// An interrupt reaches go test as SIGINT, so the benchmark's cleanups can
// run; what a run killed outright leaves is swept by the next one.
func runBenchmark(ctx context.Context, root string, stderr io.Writer) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^"+benchmark+"$",
		"-benchtime", "1x", "-timeout", "20m", benchPkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LOCKSTEP_PRIVILEGED=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, stderr)
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(stderr, "kubebench: %s\n", strings.Join(cmd.Args, " "))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run %s: %w", benchmark, err)
	}
	return out.Bytes(), nil
}

// apiserverVersion is the kube-apiserver release the benchmark runs
// against: the name of the directory tools/kube-testenv/build.sh caches it
// in.
func apiserverVersion(root string) string {
	out, err := exec.Command(filepath.Join(root, "tools", "kube-testenv", "build.sh")).Output()
	if err != nil {
		return "unknown"
	}
	return filepath.Base(strings.TrimSpace(string(out)))
}
