//go:build linux

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedRunServesAndStops runs the agent in-process (maps pinned
// in a private bpffs, no interface touched, sysctls left alone).
func TestPrivilegedRunServesAndStops(t *testing.T) {
	testenv.Privileged(t)
	cfg := testConfig(t, "10.244.0.0/24")
	mountPrivateBPF(t, &cfg)
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("agent not ready")
	}
	st, err := api.NewClient(cfg.Socket, 0).Status(context.Background())
	if err != nil || len(st.Pools) != 1 || st.Pools[0].Free != 254 {
		t.Fatalf("status: %+v %v", st, err)
	}
	// A monitor listens as the agent stops: emission must be off once
	// Run returns, not whenever its stream gets round to it.
	monitorDone := make(chan error, 1)
	go func() {
		monitorDone <- api.NewClient(cfg.Socket, 0).Monitor(context.Background(), api.MonitorRequest{}, func(api.Verdict) error { return nil })
	}()
	flag := func() uint32 {
		t.Helper()
		es, err := bpfmaps.Dump(cfg.BPFRoot, bpfmaps.MonitorMap)
		if err != nil {
			t.Fatal(err)
		}
		return es[0].Value.(uint32)
	}
	for deadline := time.Now().Add(5 * time.Second); flag() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("monitor flag not set within 5s of subscribing")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if f := flag(); f != 0 {
		t.Errorf("monitor flag %d once Run returned, want 0 (emission off)", f)
	}
	select {
	case <-monitorDone:
	case <-time.After(5 * time.Second):
		t.Error("monitor stream still open 5s after the agent stopped")
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Error("socket left after shutdown")
	}
}

// TestPrivilegedStartsWithPoliciesItCannotEnforce: manifests with a
// policy that does not compile (a CIDR netip rejects) and one whose rule
// lists more ports than a rule may hold and its namespace's budget
// allows: the agent used to refuse to start (and, restarted, to exit
// again). It starts, serves, and lockstep
// status names both, failing closed.
func TestPrivilegedStartsWithPoliciesItCannotEnforce(t *testing.T) {
	testenv.Privileged(t)
	cfg := testConfig(t, "10.244.0.0/24")
	mountPrivateBPF(t, &cfg)
	cfg.Manifests = t.TempDir()
	var ports strings.Builder
	for i := range policy.MaxPortRanges + 1 {
		fmt.Fprintf(&ports, "{port: %d}, ", 1+2*i)
	}
	manifest := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: cidr, namespace: team}\nspec:\n  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: '10.0.0.0/33'}}]}]\n" +
		"---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: ports, namespace: other}\nspec:\n  podSelector: {}\n  ingress: [{ports: [" + ports.String() + "]}]\n"
	if err := os.WriteFile(filepath.Join(cfg.Manifests, "policies.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- nil
		t.Fatalf("agent exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("agent not ready")
	}
	st, err := api.NewClient(cfg.Socket, 0).Status(context.Background())
	if err != nil || st.Dataplane == nil {
		t.Fatalf("status: %+v %v", st, err)
	}
	var names []string
	for _, f := range st.Dataplane.FailedPolicies {
		names = append(names, f.Policy)
	}
	if !slices.Equal(names, []string{"other/ports", "team/cidr"}) {
		t.Errorf("failed policies %+v, want other/ports (over its namespace's rule budget) and team/cidr", st.Dataplane.FailedPolicies)
	}
	if st.Dataplane.LastApplyError != "" {
		t.Errorf("last apply: %s", st.Dataplane.LastApplyError)
	}
}

// mountPrivateBPF mounts a bpffs of the test's own on cfg.BPFRoot (a
// directory testConfig made), unmounted when the test ends.
func mountPrivateBPF(t *testing.T, cfg *Config) {
	t.Helper()
	if err := nodesim.MountBPF(cfg.BPFRoot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.UnmountBPF(cfg.BPFRoot) })
}

// TestPrivilegedStopWhileWaitingForTheAPIServer: a Kubernetes-mode start
// that loaded its dataplane and serves its socket while it waits for the
// API server, stopped then, ends cleanly and leaves no socket and the
// state file released.
func TestPrivilegedStopWhileWaitingForTheAPIServer(t *testing.T) {
	testenv.Privileged(t)
	cfg := unreachableAPIServer(t, testConfig(t))
	mountPrivateBPF(t, &cfg)
	checkStartReleases(t, cfg, true, "", true)
}

// TestPrivilegedProbesAnswerWhileWaitingForTheAPIServer runs the agent in
// Kubernetes mode against an API server that is not there: it is alive
// (/healthz passes) and says it is not ready and why, for as long as it
// waits, instead of answering nothing until the kubelet kills it.
func TestPrivilegedProbesAnswerWhileWaitingForTheAPIServer(t *testing.T) {
	cfg := unreachableAPIServer(t, testConfig(t))
	mountPrivateBPF(t, &cfg)
	cfg.MetricsAddr = "127.0.0.1:0"
	rec := &addrRecorder{}
	cfg.Logger = slog.New(rec)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stopped while starting: %v", err)
		}
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not log the address of its probes within 10s")
		}
		addr = rec.get()
	}
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("logged address %q, want the port the kernel chose", addr)
	}
	// Give the wait a moment to begin, then probe it.
	time.Sleep(300 * time.Millisecond)
	if code, body := get(t, addr, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz while waiting for the API server = %d %q, want 200 ok", code, body)
	}
	code, body := get(t, addr, "/readyz")
	if code != 503 || !strings.Contains(body, "waiting for the API server at https://127.0.0.1:1") {
		t.Errorf("/readyz while waiting for the API server = %d %q, want 503 saying what it waits for", code, body)
	}
}
