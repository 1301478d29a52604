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

// compactManifests is a pod isolated for ingress with one allowed port.
const compactManifests = `apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-compact, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, image: c}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{ipBlock: {cidr: 192.0.2.0/24}}]
    ports: [{port: %d}]
`

// TestPrivilegedIptablesNftShowsOnlyLiveRulesOnceIdle edits a policy under
// the iptables-nft dataplane: the change leaves the old rule unreachable
// behind the new one (no rule deleted, no grace period waited for), and
// once the dataplane has been idle the agent's resync removes it, so
// iptables-save shows only the live rules and lockstep status counts none
// unreachable.
func TestPrivilegedIptablesNftShowsOnlyLiveRulesOnceIdle(t *testing.T) {
	testenv.Privileged(t)
	manifests := t.TempDir()
	policyFile := filepath.Join(manifests, "all.yaml")
	writePolicy := func(port int) {
		t.Helper()
		// Written aside and renamed, so the agent never reads half a file.
		tmp := policyFile + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, compactManifests, port), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, policyFile); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy(8080)
	node, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix: nsPrefix, BinDir: builtBinary(t), WorkDir: t.TempDir(), Manifests: manifests,
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	pod := newPod(t)
	if _, err := node.Add(ctx, nodesim.Runtime("compact", pod, "eth0", "default", "pod-compact")); err != nil {
		t.Fatal(err)
	}

	save := func() string {
		t.Helper()
		var out []byte
		err := node.NS.Do(func(ns.NetNS) error {
			var err error
			out, err = exec.Command("iptables-nft-save", "-t", "filter").CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("iptables-nft-save: %v\n%s", err, out)
		}
		return string(out)
	}
	unreachable := func() int {
		t.Helper()
		st, err := api.NewClient(node.Socket, 2*time.Second).Status(ctx)
		if err != nil || st.Dataplane == nil {
			t.Fatalf("status: %+v, %v", st, err)
		}
		if st.Dataplane.Name != "iptables-nft" {
			t.Fatalf("dataplane %q, want iptables-nft", st.Dataplane.Name)
		}
		return st.Dataplane.Counts["unreachable rules"]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not so after 30s; iptables-save:\n%s", what, save())
			}
		}
	}
	waitFor("the rule for port 8080 in force", func() bool { return strings.Contains(save(), "--dport 8080") })

	writePolicy(8081)
	waitFor("the rule for port 8081 in force", func() bool { return strings.Contains(save(), "--dport 8081") })
	// Edits land fast and the resync waits for 2 s of quiet: the old rule
	// is still there, behind the new one, right after the edit.
	if out := save(); !strings.Contains(out, "--dport 8080") {
		t.Logf("the old rule was already gone right after the edit (flushed, not prepended?):\n%s", out)
	} else if n := unreachable(); n == 0 {
		t.Errorf("iptables-save still holds the old rule but lockstep status counts no unreachable rules:\n%s", out)
	}
	waitFor("only the live rules left", func() bool {
		out := save()
		return !strings.Contains(out, "--dport 8080") && strings.Contains(out, "--dport 8081")
	})
	// The agent records what it applied once both families' restores have
	// returned; iptables-save can show the first family's commit before
	// that, so the count may lag a moment (seen once under a loaded CI).
	waitFor("lockstep status counting no unreachable rules", func() bool { return unreachable() == 0 })
}
