//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// workDirPattern names a run's work directory: cnibench-PID-RANDOM, so a
// later run can tell whether its owner is still alive.
func workDirPattern() string { return fmt.Sprintf("%s-%d-", nsPrefix, os.Getpid()) }

// sweepStaleRuns removes what runs killed outright (SIGKILL, a crash) left in
// parent: their agent, which nothing else would ever stop, and their work
// directory. Their namespaces are left to nodesim.SweepStale. It returns how
// many runs it cleaned.
func sweepStaleRuns(parent string) (int, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(parent, nsPrefix+"-*"))
	if err != nil {
		return 0, fmt.Errorf("list earlier work directories: %w", err)
	}
	var errs []error
	swept := 0
	for _, dir := range dirs {
		rest, _ := strings.CutPrefix(filepath.Base(dir), nsPrefix+"-")
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			continue
		}
		for _, p := range processesUsing(dir) {
			if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("stop process %d left by an earlier run: %w", p, err))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove earlier work directory: %w", err))
			continue
		}
		swept++
	}
	return swept, errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processesUsing lists the processes with an argument inside dir, such as
// an agent started with --socket DIR/lockstep/lockstep.sock.
func processesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	inside := []byte(dir + "/")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if bytes.HasPrefix(arg, inside) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
