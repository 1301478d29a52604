//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/kubee2e"
	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
)

// netpol runs the upstream suite's NetworkPolicy specs on the cluster of
// the name, once per dataplane, and writes each dataplane's results as its
// section of the summary file.
func netpol(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("netpol", flag.ExitOnError)
	name := fs.String("name", realnode.NameFromEnv(), "cluster name ($"+realnode.NameEnv+"): a running one is used, else one is brought up")
	dir := fs.String("dir", "", "cluster directory (default: the name's)")
	dataplanes := fs.String("dataplanes", "ebpf,iptables", "lockstep's dataplanes to run the specs on, in order")
	var focus repeatedFlag
	fs.Var(&focus, "focus", "select specs by a regular expression on their full text (repeatable; default: every NetworkPolicy spec)")
	out := fs.String("out", "", "summary file whose sections this run rewrites (default: E2E.md in the repository; - prints them)")
	reports := fs.String("reports", "", "directory for each dataplane's suite log, JUnit report and agent logs (default: bin/e2e-netpol in the repository)")
	keep := fs.Bool("keep", false, "leave a cluster this command brought up running")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		usage()
	}
	sel := focus
	if len(sel) == 0 {
		sel = kubee2e.NetpolFocus
	}
	var dps []string
	for _, dp := range strings.Split(*dataplanes, ",") {
		if dp = strings.TrimSpace(dp); dp != "" {
			dps = append(dps, dp)
		}
	}
	for _, dp := range dps {
		if _, ok := dataplaneTitles[dp]; !ok {
			return fmt.Errorf("netpol: unknown dataplane %q (want ebpf or iptables)", dp)
		}
	}

	repo, err := realnode.RepoRoot()
	if err != nil {
		return err
	}
	// The source tree as the run starts, which a run that brings its
	// cluster up builds the images from (describing it at the end would
	// name what was edited meanwhile); with a cluster already running,
	// the lockstep row, read from the nodes, says what they run.
	tree := benchkit.SourceTree(repo)
	if tree == "" {
		tree = "unknown"
	}
	if *out == "" {
		*out = filepath.Join(repo, "E2E.md")
	} else if *out == "-" {
		*out = ""
	}
	if *reports == "" {
		*reports = filepath.Join(repo, "bin", "e2e-netpol")
	}
	kubeBin, err := kubetest.BinDir(ctx, logf)
	if err != nil {
		return err
	}
	suite := filepath.Join(kubeBin, "e2e.test")
	if _, err := os.Stat(suite); err != nil {
		return fmt.Errorf("netpol: %w (make kube-testenv builds it)", err)
	}

	c, broughtUp, err := openOrUp(ctx, repo, kubeBin, *name, *dir)
	if err != nil {
		return err
	}
	found, err := c.Dataplane(ctx)
	if err != nil {
		return err
	}
	defer func() {
		switch {
		case broughtUp && !*keep:
			if err := realnode.Down(c.Name, c.Dir, logf); err != nil {
				logf("netpol: take the cluster down: %v (make e2e-down removes it)", err)
			}
		case !broughtUp && len(dps) > 0 && dps[len(dps)-1] != found:
			logf("netpol: switching the cluster back to the %s dataplane it ran", found)
			if err := c.SetDataplane(context.WithoutCancel(ctx), found); err != nil {
				logf("netpol: switch back to %s: %v", found, err)
			}
		}
	}()

	sctpErr := kubee2e.CheckSCTP()
	skips := kubee2e.NetpolSkips(sctpErr)
	if sctpErr != nil {
		logf("netpol: skipping the SCTP specs: this kernel has no SCTP (%v)", sctpErr)
	}

	run := netpolRun{c: c, suite: suite, repo: repo, tree: tree, reports: *reports, out: *out, focus: sel, skips: skips}
	failed := 0
	for _, dp := range dps {
		n, err := run.dataplane(ctx, dp)
		if err != nil {
			return err
		}
		failed += n
	}
	if failed > 0 {
		return fmt.Errorf("netpol: %d specs failed (see %s, and each dataplane's e2e.log under %s)", failed, displayOut(*out), *reports)
	}
	return nil
}

// netpolRun is what running the specs on each dataplane shares.
type netpolRun struct {
	c            *realnode.Cluster
	suite, repo  string
	tree         string // git describe of the source tree at the start
	reports, out string // out empty prints the sections
	focus        []string
	skips        []kubee2e.Skip
}

// dataplane switches the cluster to dp, runs the specs, writes dp's
// section of the summary and returns how many specs failed.
func (n netpolRun) dataplane(ctx context.Context, dp string) (int, error) {
	t0 := time.Now()
	machine := benchkit.GatherMachine("tools/e2e", os.Args[1:], filepath.Join(n.repo, "bin"), benchkit.LoadAverage())
	machine.Tree = n.tree
	logf("netpol: switching lockstep to the %s dataplane", dp)
	if err := n.c.SetDataplane(ctx, dp); err != nil {
		return 0, err
	}
	if err := n.c.WaitAgentsDataplane(ctx, dp, 3*time.Minute); err != nil {
		return 0, err
	}
	dir := filepath.Join(n.reports, dp)
	logf("netpol: running the NetworkPolicy specs on %s (log: %s)", dp, filepath.Join(dir, kubee2e.LogName))
	rep, runErr := kubee2e.Run(ctx, kubee2e.Options{
		Binary: n.suite, Kubeconfig: n.c.Kubeconfig, Kubectl: n.c.KubectlPath, Dir: dir,
		Focus: n.focus, Skips: n.skips, Logf: logf,
	})
	saveAgentLogs(ctx, n.c, dir)
	if rep == nil {
		return 0, runErr
	}
	r := result{
		dataplane: dp,
		report:    rep,
		wall:      time.Since(t0),
		machine:   machine,
		kube:      serverVersion(ctx, n.c),
		focus:     n.focus,
		skips:     n.skips,
		runErr:    runErr,
	}
	// The lockstep under test is the one the nodes run (the image the
	// cluster was brought up with), not bin/lockstep as it is now.
	r.machine.Lockstep = nodeLockstepVersion(ctx, n.c)
	if err := sectionOf(dp).Write(n.out, r.render(), os.Stdout); err != nil {
		return 0, err
	}
	logf("netpol: %s: %d passed, %d failed, %d skipped in %s; written to %s", dp,
		rep.Count(kubee2e.Passed), rep.Count(kubee2e.Failed), rep.Count(kubee2e.Skipped), r.wall.Round(time.Second), displayOut(n.out))
	for _, s := range rep.In(kubee2e.Failed) {
		logf("netpol: %s: FAILED %s: %s", dp, s.Name, s.Reason)
	}
	return rep.Count(kubee2e.Failed), runErr
}

// displayOut names where the summary went.
func displayOut(out string) string {
	if out == "" {
		return "stdout"
	}
	return out
}

// openOrUp returns the running cluster of the name, or brings one up with
// lockstep installed; broughtUp says which.
func openOrUp(ctx context.Context, repo, kubeBin, name, dir string) (c *realnode.Cluster, broughtUp bool, err error) {
	c, err = realnode.Open(name, dir, logf)
	if err == nil {
		logf("netpol: using the running cluster %s", name)
		if err := c.WaitLockstep(ctx, time.Minute); err != nil {
			return nil, false, fmt.Errorf("netpol: the running cluster %s is not ready with lockstep: %w (make e2e-down, or e2e down --name %s, and rerun)", name, err, name)
		}
		return c, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	logf("netpol: no cluster %s is running; bringing one up", name)
	c, err = bringUp(ctx, repo, kubeBin, upOptions{name: name, dir: dir, nodes: 2})
	if err != nil {
		return nil, false, err
	}
	if err := c.InstallLockstep(ctx, repo, "ebpf"); err != nil {
		_ = realnode.Down(c.Name, c.Dir, logf)
		return nil, false, err
	}
	return c, true, nil
}

// nodeLockstepVersion returns `lockstep version` as the first node's
// installed binary answers it, or "unknown".
func nodeLockstepVersion(ctx context.Context, c *realnode.Cluster) string {
	out, err := c.Exec(ctx, c.Nodes[0], "lockstep", "version")
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "unknown"
}

// serverVersion returns the API server's version, or "unknown".
func serverVersion(ctx context.Context, c *realnode.Cluster) string {
	var v struct {
		Server struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	out, err := c.Kubectl(ctx, "version", "-o", "json")
	if err != nil || json.Unmarshal(out, &v) != nil || v.Server.GitVersion == "" {
		return "unknown"
	}
	return v.Server.GitVersion
}

// saveAgentLogs writes every lockstep agent's log into dir, for a failure
// to be explained after the run; a log that cannot be read is noted, not
// fatal.
func saveAgentLogs(ctx context.Context, c *realnode.Cluster, dir string) {
	out, err := c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", "app.kubernetes.io/name=lockstep-agent",
		"-c", "agent", "--prefix", "--tail=-1", "--max-log-requests=10")
	if err != nil {
		logf("netpol: agent logs: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents.log"), out, 0o644); err != nil {
		logf("netpol: agent logs: %v", err)
	}
}
