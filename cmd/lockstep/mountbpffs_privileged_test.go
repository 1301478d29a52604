//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/testenv"
)

// fsType is the type of the file system holding dir (stat -f), seen from
// the mount namespace at nsPath ("" for the test's own).
func fsType(t *testing.T, nsPath, dir string) string {
	t.Helper()
	args := []string{"stat", "-f", "-c", "%T", dir}
	if nsPath != "" {
		args = append([]string{"nsenter", "--mount=" + nsPath, "--"}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPrivilegedMountBPFFSInAnotherNamespace runs `lockstep mount-bpffs
// --mount-ns` as the DaemonSet's init container does against the host: a
// process holding a throwaway mount namespace plays the host. The bpffs
// appears in that namespace and not in the caller's, and a second run has
// nothing to do.
func TestPrivilegedMountBPFFSInAnotherNamespace(t *testing.T) {
	testenv.Privileged(t)
	bin := filepath.Join(builtBinary(t), "lockstep")
	host := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	if err := host.Start(); err != nil {
		t.Fatalf("start unshare (util-linux): %v", err)
	}
	t.Cleanup(func() {
		_ = host.Process.Kill()
		_ = host.Wait()
	})
	nsPath := "/proc/" + strconv.Itoa(host.Process.Pid) + "/ns/mnt"
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ns, err := os.Readlink(nsPath); err == nil && ns != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare did not enter a new mount namespace within 10s")
		}
	}
	dir := filepath.Join(t.TempDir(), "sys", "fs", "bpf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	out, err := run(t, bin, nil, "mount-bpffs", "--mount-ns", nsPath, dir)
	if err != nil || !strings.Contains(out, "mounted a bpffs at "+dir+" in mount namespace "+nsPath) {
		t.Fatalf("first mount-bpffs: %v\n%s", err, out)
	}
	if got := fsType(t, nsPath, dir); got != "bpf_fs" {
		t.Errorf("in the target namespace %s is on %s, want bpf_fs", dir, got)
	}
	if got := fsType(t, "", dir); got == "bpf_fs" {
		t.Fatalf("the bpffs appeared in the caller's own mount namespace")
	}
	out, err = run(t, bin, nil, "mount-bpffs", "--mount-ns", nsPath, dir)
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second mount-bpffs: %v\n%s", err, out)
	}
	out, err = run(t, bin, nil, "mount-bpffs", "--mount-ns", filepath.Join(t.TempDir(), "missing"), dir)
	if err == nil || !strings.Contains(out, "open mount namespace") {
		t.Errorf("mount-bpffs with a missing namespace file: %v\n%s", err, out)
	}
}
