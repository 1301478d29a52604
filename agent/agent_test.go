package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/persist"
)

func testConfig(t *testing.T, pools ...string) Config {
	dir := t.TempDir()
	cfg := Config{
		Standalone: true, StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "lockstep.sock"),
		SkipSysctls: true, Logger: slog.New(slog.DiscardHandler),
		// Never the node's own pin root: a test that loads the eBPF
		// dataplane mounts a private bpffs here (mountPrivateBPF), and
		// one that does not fails instead of pinning into the machine's.
		BPFRoot: filepath.Join(dir, "bpf"),
	}
	for _, p := range pools {
		cfg.Pools = append(cfg.Pools, netip.MustParsePrefix(p))
	}
	return cfg
}

// TestBadConfigTouchesNothing: a refused start creates no state file and no
// socket.
func TestBadConfigTouchesNothing(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"host bits set", testConfig(t, "10.244.0.1/24"), "did you mean 10.244.0.0/24"},
		{"no ipv4 pool", testConfig(t, "fd00::/120"), "at least one IPv4 pool"},
		{"kubernetes mode without a node name", func() Config { c := testConfig(t); c.Standalone = false; return c }(), "needs --node-name"},
		{"kubernetes mode with pools", func() Config {
			c := testConfig(t, "10.244.0.0/24")
			c.Standalone, c.NodeName = false, "n"
			return c
		}(), "--pool-cidr is for --standalone"},
		{"kubernetes mode with a missing kubeconfig", func() Config {
			c := testConfig(t)
			c.Standalone, c.NodeName, c.Kubeconfig = false, "n", filepath.Join(t.TempDir(), "missing")
			return c
		}(), "load --kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			for _, path := range []string{tc.cfg.StateDir, tc.cfg.Socket} {
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Errorf("%s exists after a refused start", path)
				}
			}
		})
	}
}

// TestRunServesAndStops runs the agent in-process: it answers on its
// socket, and cancelling its context shuts it down and removes the socket.

func TestCompactWhenIdle(t *testing.T) {
	const every = 5 * time.Millisecond
	for _, tc := range []struct {
		name      string
		due       bool
		resyncErr error
		wantCalls func(int) bool
		want      string
	}{
		{"garbage and idle: resyncs", true, nil, func(n int) bool { return n >= 2 }, "at least 2"},
		{"nothing due: never resyncs", false, nil, func(n int) bool { return n == 0 }, "none"},
		{"a failed resync is not retried at once", true, errors.New("injected"), func(n int) bool { return n == 1 }, "exactly 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				compactWhenIdle(ctx, every, &fakeCompactor{due: tc.due, err: tc.resyncErr, calls: &calls}, nil, slog.New(slog.DiscardHandler))
			}()
			if tc.due { // wait for the first resync, however slow the machine
				for deadline := time.Now().Add(10 * time.Second); calls.Load() == 0 && time.Now().Before(deadline); {
					time.Sleep(every)
				}
			}
			time.Sleep(40 * every) // well short of the 60 intervals a failure waits
			cancel()
			<-done
			if n := int(calls.Load()); !tc.wantCalls(n) {
				t.Fatalf("%d resyncs in 40 intervals, want %s", n, tc.want)
			}
		})
	}
}

// unreachableAPIServer switches cfg to Kubernetes mode against an API
// server that is not there (a kubeconfig naming 127.0.0.1:1): the start
// waits for it until stopped.
func unreachableAPIServer(t *testing.T, cfg Config) Config {
	t.Helper()
	cfg.Standalone, cfg.Pools, cfg.NodeName = false, nil, "node-a"
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := "apiVersion: v1\nkind: Config\ncurrent-context: c\n" +
		"contexts:\n- name: c\n  context: {cluster: k, user: u}\n" +
		"clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n" +
		"users:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(cfg.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFailedStartReleasesWhatItBuilt (with
// TestPrivilegedStopWhileWaitingForTheAPIServer for the phases after the
// dataplane loads): a start that fails (or is stopped)
// in any phase takes down what the phases before it built: no socket is
// left, and the state file is released, so the next start can open it.
func TestFailedStartReleasesWhatItBuilt(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cfg             func(Config) Config
		want            string
		stateFileOpened bool
	}{
		{"the probes cannot listen", func(c Config) Config { c.MetricsAddr = "127.0.0.1:99999"; return c },
			"listen for health and metrics", false},
		{"the manifests cannot be read", func(c Config) Config { c.Manifests = filepath.Join(c.StateDir, "..", "missing"); return c },
			"load --manifests", true},
		{"an unknown dataplane", func(c Config) Config { c.Dataplane = "bogus"; return c },
			`unknown --dataplane "bogus"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkStartReleases(t, tc.cfg(testConfig(t, "10.244.0.0/24")), false, tc.want, tc.stateFileOpened)
		})
	}
}

// checkStartReleases runs a start of cfg that fails with want (or, with
// stopWhenServing, is stopped once its socket serves and must end
// cleanly), and checks that it left no socket and released the state
// file (or, !stateFileOpened, never created it).
func checkStartReleases(t *testing.T, cfg Config, stopWhenServing bool, want string, stateFileOpened bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	if stopWhenServing {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(cfg.Socket); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the socket did not serve within 10s")
			}
		}
		cancel()
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the start did not end within 30s")
	}
	switch {
	case want == "" && err != nil:
		t.Fatalf("got %v, want a clean stop", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("got %v, want %q", err, want)
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Errorf("%s left after the start ended", cfg.Socket)
	}
	if !stateFileOpened {
		if _, err := os.Stat(cfg.StateDir); !os.IsNotExist(err) {
			t.Errorf("%s exists, though the start ended before the state file", cfg.StateDir)
		}
		return
	}
	db, err := persist.Open(cfg.StateDir, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("the state file is not released: %v", err)
	}
	db.Close()
}
