//go:build linux

package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildScript is where the script that builds kube-apiserver and kubectl
// lives, relative to the repository root.
const buildScript = "tools/kube-testenv/build.sh"

// Errors a caller can act on. Each says what to run.
var (
	// ErrNoEtcd means no etcd binary is on PATH.
	ErrNoEtcd = errors.New("etcd not found on PATH; run `make deps` (Debian package etcd-server)")
	// ErrNoBuildScript means the repository that holds tools/kube-testenv
	// could not be found above the working directory, so the binaries can
	// be neither found nor built.
	ErrNoBuildScript = errors.New("cannot find " + buildScript + " above the working directory; " +
		"run from inside the lockstep repository or set Options.BinDir")
)

// binaries are the executables one Env runs.
type binaries struct {
	etcd      string
	apiserver string
	kubectl   string
}

// binDirOnce remembers the build script's answer for the life of the test
// binary: the script is cheap when the binaries exist, but there is no
// reason to ask it once per Env.
var binDirOnce struct {
	sync.Mutex
	dir string
}

// findBinaries locates etcd on PATH and kube-apiserver and kubectl in
// binDir, or, when binDir is empty, in the directory the build script
// prints, building them there first if they are missing.
func findBinaries(ctx context.Context, binDir string, logf func(string, ...any)) (binaries, error) {
	var b binaries
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return b, ErrNoEtcd
	}
	b.etcd = etcd
	if binDir == "" {
		if binDir, err = buildBinDir(ctx, logf); err != nil {
			return b, err
		}
	}
	b.apiserver = filepath.Join(binDir, "kube-apiserver")
	b.kubectl = filepath.Join(binDir, "kubectl")
	for _, p := range []string{b.apiserver, b.kubectl} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("find %s: %w (run %s)", filepath.Base(p), err, buildScript)
		}
	}
	return b, nil
}

// BinDir returns the directory of the Kubernetes binaries
// tools/kube-testenv/build.sh builds, building them first when they are
// missing (minutes, once), with its progress sent to logf.
func BinDir(ctx context.Context, logf func(string, ...any)) (string, error) {
	return buildBinDir(ctx, logf)
}

// buildBinDir runs the build script and returns the directory it prints,
// forwarding its progress lines to logf. The script takes a lock, so
// parallel test binaries build once between them.
func buildBinDir(ctx context.Context, logf func(string, ...any)) (string, error) {
	binDirOnce.Lock()
	defer binDirOnce.Unlock()
	if binDirOnce.dir != "" {
		return binDirOnce.dir, nil
	}
	script, err := findBuildScript()
	if err != nil {
		return "", err
	}
	if err := exec.CommandContext(ctx, script, "-check").Run(); err != nil {
		logf("kubetest: the Kubernetes binaries are not built yet; building them now with %s "+
			"(about 17 minutes on 2 cores, once; run it before go test to keep it out of test time)", buildScript)
	}

	start := time.Now()
	cmd := exec.CommandContext(ctx, script)
	// When ctx ends (the test's deadline), end go build and its compilers
	// with the script, not just the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", fmt.Errorf("run %s: %w", buildScript, err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("run %s: %w", buildScript, err)
	}
	var tail []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		logf("%s", sc.Text())
		tail = append(tail, sc.Text())
		if len(tail) > 20 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("run %s after %s: %w\n%s", buildScript,
			time.Since(start).Round(time.Second), err, strings.Join(tail, "\n"))
	}
	dir := strings.TrimSpace(stdout.String())
	if dir == "" {
		return "", fmt.Errorf("run %s: it printed no directory", buildScript)
	}
	binDirOnce.dir = dir
	return dir, nil
}

// findBuildScript walks up from the working directory (a test runs in its
// package's directory) to the repository that holds the build script.
func findBuildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", buildScript, err)
	}
	for {
		p := filepath.Join(dir, buildScript)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoBuildScript
		}
		dir = parent
	}
}
