package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// GoTestBench runs `go test -run ^$ -bench PATTERN ARGS... PKG` in the
// repository at repoRoot, as root's privileged tests run
// (LOCKSTEP_PRIVILEGED=1), and returns what go test printed. args are
// further flags, e.g. -benchtime 1000x or -count 8 (-count=1 unless they
// say otherwise: a benchmark result is never cached).
func GoTestBench(ctx context.Context, repoRoot, pkg, pattern string, args ...string) (*bytes.Buffer, error) {
	full := []string{"test", "-run", "^$", "-bench", pattern}
	if !hasFlag(args, "-count") {
		full = append(full, "-count=1")
	}
	full = append(append(full, args...), pkg)
	cmd := exec.CommandContext(ctx, "go", full...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "LOCKSTEP_PRIVILEGED=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return &out, nil
}

// hasFlag reports whether args set flag (-count, as -count N or -count=N).
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}
