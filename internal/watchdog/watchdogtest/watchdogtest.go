package watchdogtest

import (
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
)

// Timeout bounds how long ExpectStalled and ExpectAlive wait for the
// watchdog to change its verdict.
const Timeout = 10 * time.Second

// StaysAlive fails t if wd's check fails at any moment during d: the loops
// are turning on their own, idle or waiting.
func StaysAlive(t testing.TB, wd *watchdog.Watchdog, d time.Duration, what string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err := wd.Check(t.Context()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// ExpectStalled waits up to Timeout for wd's check to fail and to name
// loop, and fails t otherwise.
func ExpectStalled(t testing.TB, wd *watchdog.Watchdog, loop, what string) {
	t.Helper()
	var err error
	for end := time.Now().Add(Timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err = wd.Check(t.Context()); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatalf("%s for %s, and the watchdog did not notice", what, Timeout)
	}
	if !strings.Contains(err.Error(), "loop "+loop+" ") {
		t.Fatalf("%s: the watchdog says %q, want it to name loop %s", what, err, loop)
	}
}

// ExpectAlive waits up to Timeout for wd's check to pass, and fails t
// otherwise.
func ExpectAlive(t testing.TB, wd *watchdog.Watchdog, what string) {
	t.Helper()
	var err error
	for end := time.Now().Add(Timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err = wd.Check(t.Context()); err == nil {
			return
		}
	}
	t.Fatalf("%s, yet after %s the watchdog says: %v", what, Timeout, err)
}
