//go:build linux

package kubee2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure Run.
type Options struct {
	// Binary is the suite, e2e.test (tools/kube-testenv/build.sh builds it
	// into the directory it prints).
	Binary string
	// Kubeconfig reaches the cluster's API server as an administrator.
	Kubeconfig string
	// Kubectl is the kubectl the specs that shell out to it run.
	Kubectl string
	// Dir is the report directory: the suite writes junit_01.xml there,
	// and Run the suite's whole output, e2e.log. Run creates it.
	Dir string
	// Focus selects specs: regular expressions on their full text, any of
	// which selects (--ginkgo.focus). Empty runs the whole suite.
	Focus []string
	// Skips leave parts of the selection out, each with its reason.
	Skips []Skip
	// Timeout bounds the whole run (--ginkgo.timeout; Ginkgo's default is
	// one hour). Zero means six hours.
	Timeout time.Duration
	// Logf receives progress: the number of specs selected, each spec
	// as it ends, and a line a minute while one runs longer than half a
	// minute. Nil discards it.
	Logf func(format string, args ...any)
}

// LogName is the file in the report directory that holds the suite's
// output.
const LogName = "e2e.log"

// JUnitName is the report the suite writes into the report directory
// (the e2e framework's --report-dir).
const JUnitName = "junit_01.xml"

// Run runs the suite against the cluster and returns its report on the
// selected specs. A run whose specs failed is not an error: the report
// says which failed and why. Run fails when the suite could not run or
// wrote no report, and then says where its output is.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Timeout == 0 {
		o.Timeout = 6 * time.Hour
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("run the e2e suite: %w (tools/kube-testenv/build.sh builds e2e.test)", err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create report directory: %w", err)
	}
	junit := filepath.Join(o.Dir, JUnitName)
	_ = os.Remove(junit) // a report from an earlier run must not pass for this one's
	logPath := filepath.Join(o.Dir, LogName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create suite log: %w", err)
	}
	defer logFile.Close()

	cmd := exec.CommandContext(ctx, o.Binary, Args(o)...)
	cmd.Dir = o.Dir // the framework resolves its --repo-root and test files from here
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Ginkgo reports what ran so far when interrupted: give it the time.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		follow(io.TeeReader(pr, logFile), o.Logf)
	}()
	runErr := cmd.Wait()
	pw.Close()
	wg.Wait()

	f, err := os.Open(junit)
	if err != nil {
		return nil, fmt.Errorf("the e2e suite wrote no report (%v): see %s", runErr, logPath)
	}
	defer f.Close()
	rep, err := ParseJUnit(f, o.Focus, o.Skips)
	if err != nil {
		return nil, fmt.Errorf("%w: see %s", err, logPath)
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return rep, fmt.Errorf("run the e2e suite: %w: see %s", runErr, logPath)
	}
	if runErr != nil && rep.Count(Failed) == 0 {
		// The suite failed outside the specs: its set-up (nodes not
		// ready, system pods not running) or its own teardown.
		return rep, fmt.Errorf("the e2e suite failed with no spec failed (%v): see %s", runErr, logPath)
	}
	return rep, nil
}

// Args are the suite's flags for o: the framework's for a local cluster
// without a cloud, Ginkgo's for the selection and its report.
func Args(o Options) []string {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 6 * time.Hour
	}
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--provider=skeleton", // no cloud, no SSH to the nodes
		"--report-dir=" + o.Dir,
		"--e2e-output-dir=" + o.Dir,
		"--disable-log-dump", // the nodes' logs are the harness's to gather
		"--ginkgo.v",
		"--ginkgo.no-color",
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.fail-on-empty", // a focus that selects nothing is a broken run
	}
	if o.Kubectl != "" {
		args = append(args, "--kubectl-path="+o.Kubectl)
	}
	for _, f := range o.Focus {
		args = append(args, "--ginkgo.focus="+f)
	}
	for _, s := range o.Skips {
		args = append(args, "--ginkgo.skip="+s.Pattern)
	}
	return args
}

// follow reads the suite's verbose output and reports progress: how many
// specs were selected, each spec as it ends (a failure with the first line
// of its message, which Ginkgo prints after the spec's end), and every
// minute the spec still running.
func follow(r io.Reader, logf func(string, ...any)) {
	var (
		mu      sync.Mutex
		current string // the running spec
		started time.Time
		done    int
		total   = "?"
		ended   string // a failed spec's end, waiting for its message
		endedAs string
	)
	report := func(why string) {
		state, took := "passed", ""
		if m := endState.FindStringSubmatch(ended); m != nil {
			state = strings.ToLower(m[1])
		}
		if m := endTime.FindStringSubmatch(ended); m != nil {
			if d, err := time.ParseDuration(m[1] + "s"); err == nil {
				took = " in " + d.Round(100*time.Millisecond).String()
			}
		}
		if why != "" {
			why = ": " + why
		}
		logf("e2e: [%d/%s] %s%s: %s%s", done, total, state, took, endedAs, why)
		ended, endedAs = "", ""
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				if took := time.Since(started); current != "" && took >= 30*time.Second {
					logf("e2e: [%d/%s] still running (%s): %s", done+1, total, took.Round(time.Second), current)
				}
				mu.Unlock()
			}
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // the run of S for the specs left out is one long line
	afterRule := false
	for sc.Scan() {
		line := sc.Text()
		mu.Lock()
		switch {
		case strings.HasPrefix(line, "Will run "):
			// "Will run 50 of 6730 specs"
			if f := strings.Fields(line); len(f) >= 3 {
				total = f[2]
			}
			logf("e2e: %s", line)
		case line == "------------------------------":
			if ended != "" {
				report("")
			}
			afterRule = true
		case afterRule:
			afterRule = false
			if strings.HasPrefix(line, "[sig-") {
				current, started = line, time.Now()
			}
		case current != "" && (strings.HasPrefix(line, "• ") || strings.HasPrefix(line, "S [SKIPPED]")):
			done++
			ended, endedAs, current = strings.TrimPrefix(line, "• "), current, ""
			if m := endState.FindStringSubmatch(ended); m == nil || m[1] == "SKIPPED" {
				report("")
			}
		case ended != "":
			// "  [FAILED] Had 1 wrong results in reachability matrix",
			// not "  [FAILED] in [It] - file:line" (where, not why)
			if m := failureLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], "in [") {
				report(m[1])
			}
		}
		mu.Unlock()
	}
	mu.Lock()
	if ended != "" {
		report("")
	}
	mu.Unlock()
}

// endState and endTime read how Ginkgo ends a spec ("• [21.669 seconds]",
// "• [FAILED] [29.762 seconds]", "S [SKIPPED] [0.5 seconds]");
// failureLine the failure's message it prints after a failed end.
var (
	endState    = regexp.MustCompile(`\[(FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED|SKIPPED)\]`)
	endTime     = regexp.MustCompile(`\[([0-9.]+) seconds\]`)
	failureLine = regexp.MustCompile(`^  \[(?:FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED)\] (.*)$`)
)
