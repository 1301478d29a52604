//go:build linux

package realnode_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedRealNodeDownAfterFailure checks that Down leaves nothing of
// a cluster on the machine, however the cluster ended: its harness killed
// halfway through bringing it up (make e2e-up interrupted), or a bring-up
// that failed on a node. It runs before the tests that share a cluster
// (file order), and makes them bring theirs up again if one was up.
func TestPrivilegedRealNodeDownAfterFailure(t *testing.T) {
	testenv.Privileged(t)
	defer resetShared()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	repo, err := realnode.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubeBin, err := kubetest.BinDir(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	e2e, err := buildInit(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	name := realnode.NameFromEnv()

	t.Run("harness killed while bringing the cluster up", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, e2e, "up", "--no-lockstep", "--name", name, "--dir", dir)
		cmd.Dir = repo
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it once the control plane and a node run.
		err := realnode.Poll(ctx, 5*time.Minute, 200*time.Millisecond, "the first node to start", func() (bool, string, error) {
			_, err := os.Stat(filepath.Join(dir, "e2e-node-1", "status.json"))
			return err == nil, "no node yet", nil
		})
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if left := realnode.Leftovers(name, dir); len(left) == 0 {
			t.Fatal("nothing was up when the harness was killed: the test proves nothing")
		}
		if err := realnode.Down(name, dir, t.Logf); err != nil {
			t.Fatal(err)
		}
		if left := realnode.Leftovers(name, dir); len(left) > 0 {
			t.Fatalf("Down left:\n%s", strings.Join(left, "\n"))
		}
	})

	t.Run("bring-up failed on a node", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "not-an-image.tar")
		if err := os.WriteFile(bad, []byte("not a tar"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := realnode.Up(ctx, realnode.Options{Name: name, Dir: dir, KubeBinDir: kubeBin, InitBinary: e2e, Images: []string{bad}, Logf: t.Logf})
		if err == nil || !strings.Contains(err.Error(), "import not-an-image.tar") {
			t.Fatalf("Up with an archive no node can import: %v, want the import's error", err)
		}
		if left := realnode.Leftovers(name, dir); len(left) > 0 {
			t.Fatalf("a failed Up left:\n%s", strings.Join(left, "\n"))
		}
	})
}
