//go:build linux

package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/testenv"
)

// KubeEnv names the environment switch that enables the tests which run a
// real kube-apiserver, for a developer who does not want the privileged
// tests too. Only the value "1" turns them on; testenv.PrivilegedEnv=1
// turns them on as well.
const KubeEnv = "LOCKSTEP_KUBE"

// startTimeout bounds starting etcd and kube-apiserver once the binaries
// are there; a healthy start takes a few seconds.
const startTimeout = 2 * time.Minute

// Enabled reports whether the kube integration tests should run: KubeEnv or
// testenv.PrivilegedEnv is "1".
func Enabled() bool {
	return os.Getenv(KubeEnv) == "1" || os.Getenv(testenv.PrivilegedEnv) == "1"
}

// Start starts a new Env for tb and stops it when tb ends; the cleanup is
// registered before anything starts, so it also runs when Start fails
// halfway. Start skips tb unless [Enabled], and fails it when the
// environment cannot be had: a missing etcd or binary is a setup problem to
// fix, not a reason to test nothing. When the kube-apiserver and kubectl
// binaries are missing, Start builds them first (minutes, once).
func Start(tb testing.TB) *Env {
	tb.Helper()
	if !Enabled() {
		tb.Skipf("kube integration test: set %s=1 (or %s=1) to run it against a real kube-apiserver and etcd",
			KubeEnv, testenv.PrivilegedEnv)
	}
	e := newEnv(Options{Logf: tb.Logf})
	tb.Cleanup(func() {
		if tb.Failed() {
			e.logTails(tb.Logf)
		}
		if err := e.Stop(); err != nil {
			tb.Errorf("stop kube test env: %v", err)
		}
	})

	ctx := context.Background()
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	if err := e.start(ctx); err != nil {
		tb.Fatalf("start kube test env: %v", err)
	}
	return e
}
