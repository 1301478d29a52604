//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedSeed002LegacyCleanupSurvivesFailuresAndRestart replays seed
// 002 with the real tools: a node's iptables moves from legacy to nft while
// lockstep has rules in legacy; the clean-up of legacy fails transiently,
// the agent is killed while it is still pending, and after the restart the
// clean-up resumes — with the legacy tools — until legacy holds nothing of
// lockstep's, while the nft dataplane enforces.
func TestPrivilegedSeed002LegacyCleanupSurvivesFailuresAndRestart(t *testing.T) {
	testenv.Privileged(t)
	realRestore, err := exec.LookPath("iptables-legacy-restore")
	if err != nil {
		t.Fatalf("iptables-legacy-restore: %v (make deps installs iptables)", err)
	}
	// A wrapper that fails while the counter file says so: the transient
	// errors (xtables lock, EAGAIN) of seed 002.
	wrapDir := t.TempDir()
	fails := filepath.Join(wrapDir, "fails")
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then
	echo $((n-1)) > %[1]s
	echo "iptables-legacy-restore: Resource temporarily unavailable (injected by the test)" >&2
	exit 4
fi
exec %[2]s "$@"
`, fails, realRestore)
	if err := os.WriteFile(filepath.Join(wrapDir, "iptables-legacy-restore"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", wrapDir+string(os.PathListSeparator)+os.Getenv("PATH"))

	node, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix: nsPrefix, BinDir: builtBinary(t), WorkDir: t.TempDir(),
		Pools: []string{"10.244.0.0/24"}, AgentArgs: []string{"--dataplane", "iptables"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", node.AgentLog())
		}
		if err := node.Close(); err != nil {
			t.Error(err)
		}
	})
	inNode := func(name string, args ...string) string {
		t.Helper()
		var out []byte
		err := node.NS.Do(func(ns.NetNS) error {
			var err error
			out, err = exec.Command(name, args...).CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	status := func() *api.DataplaneStatus {
		t.Helper()
		st, err := api.NewClient(node.Socket, 2*time.Second).Status(ctx)
		if err != nil || st.Dataplane == nil {
			t.Fatalf("status: %+v, %v", st, err)
		}
		return st.Dataplane
	}

	// 1. The node runs iptables-legacy (kube-proxy's hint says so), and so
	// does lockstep, with a pod.
	inNode("iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if dp := status(); dp.Name != "iptables-legacy" {
		t.Fatalf("dataplane %q, want iptables-legacy", dp.Name)
	}
	pod := newPod(t)
	if _, err := node.Add(ctx, podRuntime("seed002", pod)); err != nil {
		t.Fatal(err)
	}
	if out := inNode("iptables-legacy-save", "-t", "filter"); !strings.Contains(out, "LOCKSTEP-E-") {
		t.Fatalf("no lockstep endpoint chain in legacy:\n%s", out)
	}
	if err := node.StopAgent(); err != nil {
		t.Fatal(err)
	}

	// 2. The node moves to nft. The first legacy clean-up attempts fail.
	inNode("iptables-nft", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
	if err := os.WriteFile(fails, []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	dp := status()
	if dp.Name != "iptables-nft" {
		t.Fatalf("dataplane %q after the switch, want iptables-nft", dp.Name)
	}
	if len(dp.PendingCleanups) != 1 || dp.PendingCleanups[0].Backend != "iptables-legacy" ||
		dp.PendingCleanups[0].Attempts == 0 || !strings.Contains(dp.PendingCleanups[0].LastError, "injected") {
		t.Fatalf("pending clean-ups after a failed first attempt: %+v", dp.PendingCleanups)
	}
	attempts := dp.PendingCleanups[0].Attempts

	// 3. The agent dies with the clean-up pending; the restart remembers it.
	if err := node.KillAgent(); err != nil {
		t.Fatal(err)
	}
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	dp = status()
	if len(dp.PendingCleanups) == 1 && dp.PendingCleanups[0].Attempts < attempts {
		t.Fatalf("the restart lost the clean-up's history: %d attempts, had %d", dp.PendingCleanups[0].Attempts, attempts)
	}

	// 4. Retried with backoff on legacy until nothing is left.
	for len(dp.PendingCleanups) > 0 && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		dp = status()
	}
	if len(dp.PendingCleanups) > 0 {
		t.Fatalf("clean-up still pending: %+v", dp.PendingCleanups)
	}
	if out := inNode("iptables-legacy-save"); strings.Contains(out, "LOCKSTEP") || strings.Contains(out, "lockstep") {
		t.Errorf("legacy still holds lockstep rules:\n%s", out)
	}
	if out := inNode("ipset", "list", "-n"); strings.Contains(out, "lockstep-legacy") {
		t.Errorf("legacy ipsets left:\n%s", out)
	}
	if out := inNode("iptables-nft-save", "-t", "filter"); !strings.Contains(out, "LOCKSTEP-E-") {
		t.Errorf("the nft dataplane does not enforce the pod:\n%s", out)
	}
	if !strings.Contains(inNode("iptables-legacy-save", "-t", "mangle"), "KUBE-IPTABLES-HINT") {
		t.Error("the clean-up removed a chain that is not lockstep's")
	}
	if err := node.Del(ctx, podRuntime("seed002", pod)); err != nil {
		t.Error(err)
	}
}
