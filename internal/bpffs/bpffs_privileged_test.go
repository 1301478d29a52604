//go:build linux

package bpffs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/test/testenv"
)

// privateNSEnv, set, tells a re-executed test binary that it runs in the
// throwaway mount namespace its parent made, and where its work directory
// is; parentNSEnv is the parent's mount namespace, which the child must
// not be in.
const (
	privateNSEnv = "LOCKSTEP_BPFFS_TEST_DIR"
	parentNSEnv  = "LOCKSTEP_BPFFS_TEST_PARENT_NS"
)

// inPrivateMountNS re-runs the calling test in a new mount namespace with
// private propagation (unshare --mount --propagation private), so nothing
// it mounts is seen by, or outlives it on, the machine. It returns the work
// directory when the caller is that child, and "" in the parent, after the
// child has passed.
func inPrivateMountNS(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(privateNSEnv); dir != "" {
		if self := mountNS(t, "self"); self == os.Getenv(parentNSEnv) {
			t.Fatalf("re-executed in mount namespace %s, its parent's: refusing to mount anything", self)
		}
		return dir
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to make a throwaway mount namespace: %v", err)
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), privateNSEnv+"="+t.TempDir(), parentNSEnv+"="+mountNS(t, "self"))
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the test failed in its private mount namespace: %v", err)
	}
	return ""
}

// mountNS is the mount namespace of process pid ("self" for this one).
func mountNS(t *testing.T, pid string) string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// bpfMounts counts the bpffs mounts at dir in the mount namespace of
// process pid, from its mountinfo.
//
// pid "thread-self" is the calling thread's view: /proc/self is the main
// thread's, and a goroutine that entered another mount namespace and
// exited locked to the main thread leaves that thread there (the runtime
// cannot end the main thread, it parks it).
func bpfMounts(t *testing.T, pid, dir string) int {
	t.Helper()
	if pid == "thread-self" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	f, err := os.Open("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
			}
		}
		if len(fields) > 4 && sep > 0 && sep+1 < len(fields) && fields[4] == dir && fields[sep+1] == "bpf" {
			n++
		}
	}
	return n
}

// TestPrivilegedEnsureRoot runs EnsureRoot, as the agent's eBPF dataplane
// does on start, on every layout a node can have, in a throwaway mount
// namespace.
func TestPrivilegedEnsureRoot(t *testing.T) {
	testenv.Privileged(t)
	work := inPrivateMountNS(t)
	if work == "" {
		return
	}
	mountAt := func(dir string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("bpffs", dir, "bpf", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		// setup prepares base and returns the pin root.
		setup func(base string) string
		// wantMount is where EnsureRoot must mount, relative to base; ""
		// for nowhere.
		wantMount string
	}{
		{
			name: "no bpffs: mounted at the root's parent, as /sys/fs/bpf for /sys/fs/bpf/lockstep",
			setup: func(base string) string {
				if err := os.MkdirAll(filepath.Join(base, "fs/bpf"), 0o755); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(base, "fs/bpf/lockstep")
			},
			wantMount: "fs/bpf",
		},
		{
			name:      "no bpffs and no parent directory: the parent is created and mounted",
			setup:     func(base string) string { return filepath.Join(base, "run/bpf/lockstep") },
			wantMount: "run/bpf",
		},
		{
			name: "the parent is a bpffs (systemd's /sys/fs/bpf): only the root is created",
			setup: func(base string) string {
				mountAt(filepath.Join(base, "fs/bpf"))
				return filepath.Join(base, "fs/bpf/lockstep")
			},
		},
		{
			name: "the root is a bpffs of its own (a test node's): nothing changes",
			setup: func(base string) string {
				mountAt(filepath.Join(base, "bpf"))
				return filepath.Join(base, "bpf")
			},
		},
		{
			name: "the root is deeper in a bpffs: only the root is created",
			setup: func(base string) string {
				mountAt(filepath.Join(base, "fs/bpf"))
				if err := os.Mkdir(filepath.Join(base, "fs/bpf/cilium"), 0o700); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(base, "fs/bpf/cilium/lockstep")
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(work, strconv.Itoa(i))
			if err := os.MkdirAll(base, 0o755); err != nil {
				t.Fatal(err)
			}
			root := tt.setup(base)
			before := map[string]int{}
			for _, dir := range []string{root, filepath.Dir(root)} {
				before[dir] = bpfMounts(t, "thread-self", dir)
			}
			for attempt := 1; attempt <= 2; attempt++ {
				got, err := EnsureRoot(root)
				if err != nil {
					t.Fatalf("attempt %d: EnsureRoot(%s): %v", attempt, root, err)
				}
				want := ""
				if tt.wantMount != "" && attempt == 1 {
					want = filepath.Join(base, tt.wantMount)
				}
				if got != want {
					t.Errorf("attempt %d: EnsureRoot mounted at %q, want %q", attempt, got, want)
				}
				if on, err := On(root); err != nil || !on {
					t.Errorf("attempt %d: root %s on a bpffs: %v %v", attempt, root, on, err)
				}
			}
			for dir, n := range before {
				want := n
				if tt.wantMount != "" && dir == filepath.Join(base, tt.wantMount) {
					want++
				}
				if got := bpfMounts(t, "thread-self", dir); got != want {
					t.Errorf("%d bpffs mounts at %s after two calls, want %d", got, dir, want)
				}
			}
		})
	}
	t.Run("a root right under / is refused", func(t *testing.T) {
		before := bpfMounts(t, "self", "/")
		if _, err := EnsureRoot("/lockstep-test-root"); err == nil || !strings.Contains(err.Error(), "directory of its own") {
			t.Errorf("EnsureRoot(/lockstep-test-root) = %v, want a refusal", err)
		}
		os.Remove("/lockstep-test-root")
		if got := bpfMounts(t, "self", "/"); got != before {
			t.Errorf("a bpffs was mounted on /")
		}
	})
}

// holdMountNS starts a process holding a new mount namespace of its own,
// with private propagation, and returns its pid; the process is killed
// when the test ends, and its namespace goes with it.
func holdMountNS(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start unshare (util-linux): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	self := mountNS(t, "self")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ns, err := os.Readlink("/proc/" + pid + "/ns/mnt"); err == nil && ns != self {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare did not enter a new mount namespace within 10s")
		}
	}
}

// TestPrivilegedMountInNamespace is what the DaemonSet's init container
// does to the host: the bpffs is mounted in the namespace named, not in
// the caller's, and a second call finds it there.
func TestPrivilegedMountInNamespace(t *testing.T) {
	testenv.Privileged(t)
	pid := holdMountNS(t)
	dir := filepath.Join(t.TempDir(), "fs", "bpf")
	nsPath := fmt.Sprintf("/proc/%s/ns/mnt", pid)

	mounted, err := MountInNamespace(nsPath, dir)
	if err != nil || !mounted {
		t.Fatalf("MountInNamespace(%s, %s) = %v, %v; want a mount", nsPath, dir, mounted, err)
	}
	if n := bpfMounts(t, pid, dir); n != 1 {
		t.Errorf("%d bpffs mounts at %s in the target namespace, want 1", n, dir)
	}
	if n := bpfMounts(t, "thread-self", dir); n != 0 {
		t.Fatalf("%d bpffs mounts at %s in the test's own namespace, want none", n, dir)
	}
	if on, _ := On(dir); on {
		t.Error("the test's own namespace sees a bpffs at the directory")
	}
	mounted, err = MountInNamespace(nsPath, dir)
	if err != nil || mounted {
		t.Errorf("second MountInNamespace = %v, %v; want nothing to do", mounted, err)
	}
	if n := bpfMounts(t, pid, dir); n != 1 {
		t.Errorf("%d bpffs mounts at %s after the second call, want still 1", n, dir)
	}
	// The calling thread left the process's namespace and died with its
	// goroutine: this goroutine still sees the test's own file system.
	if n := bpfMounts(t, "thread-self", dir); n != 0 {
		t.Error("after MountInNamespace the process sees the target namespace's mount")
	}

	if _, err := MountInNamespace("/proc/self/ns/net", dir); err == nil || !strings.Contains(err.Error(), "enter mount namespace") {
		t.Errorf("MountInNamespace with a network namespace = %v, want a refusal", err)
	}
}
