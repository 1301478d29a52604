//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockstep.dev/lockstep/probe/nodesim"

	"lockstep.dev/lockstep/probe"
	"lockstep.dev/lockstep/test/testenv"
)

// TestProbeCommandErrors covers the errors raised before anything is
// created (a bad --output is the root command's, see
// TestBadOutputOneWording).
func TestProbeCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--manifests", "x", "--via", "clusterip"}, "want pod-ip, service or both"},
		{nil, "no --manifests given"},
	} {
		cmd := newProbeCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("probe %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestPrivilegedProbeCommand runs `lockstep probe` on the no-policies
// scenario through the built binary: JSON on stdout, progress on stderr,
// every probe allowed.
func TestPrivilegedProbeCommand(t *testing.T) {
	testenv.Privileged(t)
	bin := filepath.Join(builtBinary(t), "lockstep")
	dir := filepath.Join("..", "..", "probe", "testdata", "scenarios", "no-policies")
	cmd := exec.Command(bin, "probe", "--manifests", dir, "-o", "json", "--connect-timeout", "500ms")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Fatalf("lockstep probe: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "probing ") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	var rep probe.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decode JSON output: %v\n%s", err, stdout.String())
	}
	if len(rep.Pods) != 9 || len(rep.Results) == 0 {
		t.Fatalf("%d pods and %d results, want 9 pods and some results", len(rep.Pods), len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Protocol != probe.SCTP && (r.Allowed == nil || !*r.Allowed) {
			t.Errorf("%s -> %s %d/%s not allowed without policies (%s)", r.From, r.To, r.Port, r.Protocol, r.Error)
		}
	}
}

// TestPrivilegedProbeCommandViaService runs `lockstep probe --via service`
// on a scenario with Services through the built binary: only the tables
// through Services, and x/nobody, which has no endpoint, refused.
func TestPrivilegedProbeCommandViaService(t *testing.T) {
	testenv.Privileged(t)
	bin := filepath.Join(builtBinary(t), "lockstep")
	dir := filepath.Join("..", "..", "probe", "testdata", "scenarios", "service-no-endpoints")
	cmd := exec.Command(bin, "probe", "--manifests", dir, "--via", "service", "--dataplane", "iptables", "--attempts", "4")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("lockstep probe: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "up to 4 connections each") {
		t.Errorf("progress does not say --attempts 4:\n%s", stderr.String())
	}
	tab, err := probe.ParseTable(stdout.String())
	if err != nil {
		t.Fatalf("parse the output: %v\n%s", err, stdout.String())
	}
	var headings []string
	for _, b := range tab.Blocks {
		headings = append(headings, b.Heading())
	}
	if want := []string{"svc:80/TCP", "svc:53/UDP"}; !slices.Equal(headings, want) {
		t.Fatalf("blocks %v, want %v:\n%s", headings, want, stdout.String())
	}
	if n := tab.Count(probe.CellRefused); n != 9 {
		t.Errorf("%d cells refused, want 9 (three pods to x/nobody on two ports and to x/unnamed):\n%s", n, stdout.String())
	}
}

// TestPrivilegedProbeCommandSIGTERM stops `lockstep probe` with SIGTERM
// while it creates pods and checks it removed its namespaces, work directory and
// agent before exiting.
func TestPrivilegedProbeCommandSIGTERM(t *testing.T) {
	testenv.Privileged(t)
	bin := filepath.Join(builtBinary(t), "lockstep")
	dir := filepath.Join("..", "..", "probe", "testdata", "scenarios", "deny-all-both")
	cmd := exec.Command(bin, "probe", "--manifests", dir, "--connect-timeout", "3s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "creating ") {
			// Pods are being added through CNI, the agent is running.
			time.Sleep(20 * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	err = cmd.Wait()
	if !strings.Contains(seen.String(), "creating ") {
		t.Fatalf("probe never started creating pods (%v):\n%s", err, seen.String())
	}
	if err == nil {
		t.Errorf("probe stopped by SIGTERM exited 0:\n%s", seen.String())
	}
	// Only this probe's leftovers: other packages' tests may be probing in
	// parallel. The probe names everything PREFIX-PID-...
	mine := fmt.Sprintf("%s-%d-", probe.NSPrefix, cmd.Process.Pid)
	entries, _ := os.ReadDir(nodesim.RunDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	if dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), mine+"*")); len(dirs) > 0 {
		t.Errorf("work directories left behind: %v", dirs)
	}
	if out, _ := exec.Command("pgrep", "-f", "/"+mine).Output(); len(out) > 0 {
		t.Errorf("agent processes left behind: %s", out)
	}
}
