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
