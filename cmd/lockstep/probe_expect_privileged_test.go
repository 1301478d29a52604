//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedProbeExpect runs `lockstep probe --expect` on a scenario
// twice through the built binary: with its own expected table it says
// "matches" and exits 0; with one cell flipped it prints that cell and
// exits 1. --explain prints each cell's reason, naming the policy.
func TestPrivilegedProbeExpect(t *testing.T) {
	testenv.Privileged(t)
	bin := filepath.Join(builtBinary(t), "lockstep")
	dir := filepath.Join("..", "..", "probe", "testdata", "scenarios", "default-deny-ingress")
	good := filepath.Join(dir, "expected.txt")
	text, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// Flip x/b -> x/a on 80/TCP, denied by the scenario's policy, to allowed.
	lines := strings.Split(string(text), "\n")
	flipped := false
	for i, l := range lines {
		if strings.HasPrefix(l, "x/b ") {
			lines[i] = "x/b" + strings.Replace(l[3:], "X", ".", 1)
			flipped = true
			break
		}
	}
	if !flipped {
		t.Fatalf("no row x/b in %s", good)
	}
	bad := filepath.Join(t.TempDir(), "expected.txt")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}

	run := func(expect string, extra ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"probe", "--manifests", dir, "--timeout", "500ms", "--expect", expect}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := run(good, "--explain")
	if err != nil {
		t.Fatalf("probe --expect %s: %v\nstderr:\n%s", good, err, stderr)
	}
	if !strings.Contains(stderr, "matches "+good) {
		t.Errorf("no \"matches %s\" on stderr:\n%s", good, stderr)
	}
	if !strings.Contains(stdout, "default deny: x/a is isolated for ingress by x/") || strings.Contains(stdout, "EXPLAIN SAYS") {
		t.Errorf("--explain does not name the policy, or disagrees with the packets:\n%s", stdout)
	}

	_, stderr, err = run(bad)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("probe --expect with a flipped cell x/b -> x/a): %v, want exit status 1\nstderr:\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "1 cells differ from "+bad) || !strings.Contains(strings.Join(strings.Fields(stderr), " "), "x/b x/a 80/TCP . X") {
		t.Errorf("the differing cell x/b -> x/a is not printed:\n%s", stderr)
	}
}
