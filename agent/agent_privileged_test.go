//go:build linux

package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/internal/nodesim"
	"lockstep.dev/lockstep/internal/testenv"
)

// TestPrivilegedRunServesAndStops runs the agent in-process (maps pinned
// in a private bpffs, no interface touched, sysctls left alone).
func TestPrivilegedRunServesAndStops(t *testing.T) {
	testenv.Privileged(t)
	cfg := testConfig(t, "10.244.0.0/24")
	cfg.BPFRoot = filepath.Join(t.TempDir(), "bpf")
	if err := nodesim.MountBPF(cfg.BPFRoot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.UnmountBPF(cfg.BPFRoot) })
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
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Error("socket left after shutdown")
	}
}
