//go:build linux

package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// markerFile marks a directory as a cluster directory: Down removes a
// directory only when it holds one, so a mistyped --dir cannot delete
// anything else.
const markerFile = ".lockstep-e2e"

// Down takes down the cluster called name whose directory is dir (the
// default directory when empty), and everything any earlier cluster of
// that name left on the machine: the hosts' inits (and with them every
// process of their PID namespaces), the network namespaces and cgroups
// named after it, and the directory. It is safe to run at any time, as
// often as wanted, also when nothing is up.
func Down(name, dir string, logf func(string, ...any)) error {
	if dir == "" {
		dir = DefaultDir(name)
	}
	p := prefix(name)
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var errs []error
	inits := clusterInits(p)
	if len(inits) > 0 {
		logf("realnode: stopping %d hosts", len(inits))
	}
	for _, pid := range inits {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	// Each init stops its services (kubelet, containerd, ...) with a
	// grace period, then exits, which ends everything else in its PID
	// namespace.
	deadline := time.Now().Add(stopGrace + 15*time.Second)
	for len(alive(inits)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range alive(inits) {
		logf("realnode: host init %d did not stop; killing it", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Anything else still in a cluster namespace (a command run by
	// Exec, a host started without its init).
	for i := 0; i < 50; i++ {
		rest := processesInClusterNetns(p)
		if len(rest) == 0 {
			break
		}
		for _, pid := range rest {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rest := processesInClusterNetns(p); len(rest) > 0 {
		errs = append(errs, fmt.Errorf("processes %v are still in the cluster's network namespaces", rest))
	}
	if err := deleteNetworks(p); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(p); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(filepath.Join(dir, markerFile)); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove cluster dir: %w", err))
		}
	} else if _, err := os.Stat(dir); err == nil {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			errs = append(errs, fmt.Errorf("%s is not a cluster directory (no %s): left alone", dir, markerFile))
		}
	}
	return errors.Join(errs...)
}

// netnsInode returns the inode of a network namespace file (a /run/netns
// entry or /proc/PID/ns/net).
func netnsInode(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// clusterInodes returns the inodes of the cluster's network namespaces, by
// name.
func clusterInodes(prefix string) map[uint64]string {
	out := map[uint64]string{}
	for _, name := range clusterNetns(prefix) {
		if ino, ok := netnsInode("/run/netns/" + name); ok {
			out[ino] = name
		}
	}
	return out
}

// processes returns every PID on the machine with the network namespace it
// is in.
func processes() map[int]uint64 {
	entries, _ := os.ReadDir("/proc")
	out := map[int]uint64{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ino, ok := netnsInode(fmt.Sprintf("/proc/%d/ns/net", pid)); ok {
			out[pid] = ino
		}
	}
	return out
}

// processesInClusterNetns lists the processes in one of the cluster's
// network namespaces, but this one: creating a namespace can leave this
// process's main thread in it (see nodesim.Create), and /proc reports the
// main thread's.
func processesInClusterNetns(prefix string) []int {
	inodes := clusterInodes(prefix)
	var out []int
	for pid, ino := range processes() {
		if _, ok := inodes[ino]; ok && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// isInit reports whether pid is a host's init: PID 1 of a PID namespace
// one level below the one this process sees (the containers of a node,
// PID 1 of their own namespaces inside the node's, are two levels below).
func isInit(pid int) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) == 2 && f[1] == "1"
		}
	}
	return false
}

// clusterInits lists the inits of the cluster's hosts.
func clusterInits(prefix string) []int {
	var out []int
	for _, pid := range processesInClusterNetns(prefix) {
		if isInit(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// initPIDs lists the inits running in a host's network namespace: one
// when the host is up.
func initPIDs(h Host) []int {
	ino, ok := netnsInode("/run/netns/" + h.Netns)
	if !ok {
		return nil
	}
	var out []int
	for pid, n := range processes() {
		if n == ino && isInit(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupRoot is where the machine's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// hierarchies lists the mounted cgroup hierarchies (v1 controllers and the
// unified one), as directories.
func hierarchies() []string {
	entries, _ := os.ReadDir(cgroupRoot)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(cgroupRoot, e.Name()))
		}
	}
	if len(out) == 0 {
		// A cgroup v2 only machine: the root is the hierarchy.
		out = []string{cgroupRoot}
	}
	return out
}

// makeCgroups creates a node's cgroup root in every hierarchy; cpusets
// need their CPUs and memory nodes before a task may join.
func makeCgroups(h Host) error {
	for _, hier := range hierarchies() {
		dir := filepath.Join(hier, h.CgroupName())
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(hier, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroups removes every cgroup named prefix-* (and what the kubelet
// made under it), deepest first. Cgroups whose tasks are still exiting are
// retried for a few seconds.
func removeCgroups(prefix string) error {
	var last error
	for attempt := 0; attempt < 50; attempt++ {
		last = nil
		for _, hier := range hierarchies() {
			tops, _ := filepath.Glob(filepath.Join(hier, prefix+"-*"))
			for _, top := range tops {
				if err := removeCgroupTree(top); err != nil {
					last = err
				}
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroups: %w", last)
}

func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// Leftovers lists what the cluster called name in dir, or any earlier one
// of that name, still has on the machine: network namespaces and cgroups
// named after it, processes in those namespaces, mounts under dir, and dir
// itself. Empty after Down.
func Leftovers(name, dir string) []string {
	if dir == "" {
		dir = DefaultDir(name)
	}
	p := prefix(name)
	var out []string
	for _, n := range clusterNetns(p) {
		out = append(out, "network namespace "+n)
	}
	for _, pid := range processesInClusterNetns(p) {
		out = append(out, fmt.Sprintf("process %d in a cluster network namespace", pid))
	}
	for _, hier := range hierarchies() {
		tops, _ := filepath.Glob(filepath.Join(hier, p+"-*"))
		for _, t := range tops {
			out = append(out, "cgroup "+t)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	if _, err := os.Stat(dir); err == nil {
		out = append(out, "directory "+dir)
	}
	return out
}
