package testenv

import (
	"os"
	"testing"
)

// PrivilegedEnv names the environment switch that enables privileged tests.
// Only the value "1" turns them on.
const PrivilegedEnv = "LOCKSTEP_PRIVILEGED"

// Privileged skips tb unless PrivilegedEnv is "1", and fails it when the
// switch is set but the process is not root: asking for privileged tests on
// a machine that cannot run them is a mistake worth seeing, not a skip.
func Privileged(tb testing.TB) {
	tb.Helper()
	if os.Getenv(PrivilegedEnv) != "1" {
		tb.Skipf("privileged test: set %s=1 and run as root to enable it", PrivilegedEnv)
	}
	if euid := os.Geteuid(); euid != 0 {
		tb.Fatalf("%s=1 but the test runs as euid %d; run privileged tests as root (e.g. sudo -E go test)", PrivilegedEnv, euid)
	}
}

// Missing reports that something a test needs, a tool or a kernel
// feature, is not on this machine. With privileged tests switched on (a CI
// run, or an engineer asking for everything) that is a failure: a run must
// not turn green by testing less. Otherwise the test is skipped.
func Missing(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv(PrivilegedEnv) == "1" {
		tb.Fatalf("%s is missing (%v); %s=1 runs every test, so install it (make deps)", what, err, PrivilegedEnv)
	}
	tb.Skipf("%s is missing: %v", what, err)
}
