//go:build linux

package nodesim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// RunDirPattern is the os.MkdirTemp pattern of the work directory of a
// run of a tool or command whose namespaces are named with prefix:
// PREFIX-PID-, so SweepStaleRuns can tell whether its owner is alive.
func RunDirPattern(prefix string) string { return fmt.Sprintf("%s-%d-", prefix, os.Getpid()) }

// SweepStaleRuns removes what runs killed outright (SIGKILL, a crash) left
// in parent (os.TempDir() when empty) under RunDirPattern(prefix): every
// process with an argument inside their work directory (an agent started
// with --socket DIR/s.sock, which nothing else would ever stop), the bpffs
// mounts under it, and the directory. Directories of live runs are left
// alone; the namespaces are SweepStale's. It returns how many directories
// it removed.
func SweepStaleRuns(prefix, parent string) (int, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(parent, prefix+"-*"))
	if err != nil {
		return 0, fmt.Errorf("list earlier work directories: %w", err)
	}
	var errs []error
	removed := 0
	for _, dir := range dirs {
		rest, _ := strings.CutPrefix(filepath.Base(dir), prefix+"-")
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			continue
		}
		for _, p := range ProcessesUsing(dir) {
			if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("stop process %d left by an earlier run: %w", p, err))
			}
		}
		if err := unmountUnder(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove earlier work directory: %w", err))
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

// ProcessesUsing lists the processes other than this one with an argument
// inside dir.
func ProcessesUsing(dir string) []int {
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

// unmountUnder unmounts every bpffs mounted inside dir (MountBPF's).
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 || postFields[0] != "bpf" {
			continue
		}
		if strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	var errs []error
	for _, m := range mounts {
		errs = append(errs, UnmountBPF(m))
	}
	return errors.Join(errs...)
}
