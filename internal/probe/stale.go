//go:build linux

package probe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"lockstep.dev/lockstep/internal/nodesim"
)

// NSPrefix names every namespace and work directory a probe run creates
// (PREFIX-PID-N), so SweepStale can tell a dead run's leftovers from a live
// one's.
const NSPrefix = "lsprobe"

// workDirPattern is the os.MkdirTemp pattern of a run's work directory.
func workDirPattern() string { return fmt.Sprintf("%s-%d-", NSPrefix, os.Getpid()) }

// SweepStale removes what probe runs killed outright (SIGKILL, a crash)
// left behind: their namespaces, any process still running from their work
// directory, their bpffs mount and the directory itself. Runs whose process
// is alive are left alone. It returns how many namespaces and directories
// it removed.
func SweepStale() (int, error) {
	removed, err := nodesim.SweepStale(NSPrefix)
	errs := []error{err}
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), NSPrefix+"-*"))
	errs = append(errs, err)
	for _, dir := range dirs {
		rest, _ := strings.CutPrefix(filepath.Base(dir), NSPrefix+"-")
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		for _, p := range processesUsing(dir) {
			if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("stop process %d left by an earlier probe: %w", p, err))
			}
		}
		if err := nodesim.UnmountBPF(filepath.Join(dir, "node", "bpf")); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove earlier probe directory: %w", err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processesUsing lists the processes with an argument inside dir, such as
// an agent started with --socket DIR/s.sock.
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
