//go:build linux

package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/test/testenv"
)

// inReadOnlyMount runs fn with dir bind-mounted read-only over itself, in a
// mount namespace of its own: the mount is seen by fn's thread only and
// ends with it. The thread is never unlocked, so the runtime ends it with
// its goroutine rather than let another goroutine run in that namespace.
func inReadOnlyMount(dir string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("unshare the mount namespace: %w", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- fmt.Errorf("make mounts private: %w", err)
			return
		}
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			done <- fmt.Errorf("bind mount %s: %w", dir, err)
			return
		}
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			done <- fmt.Errorf("remount %s read-only: %w", dir, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// TestPrivilegedReadOnlyFileSystem: a state file, or a state directory, on
// a read-only file system is ErrReadOnly, not corruption, and the error
// says not to move the file aside.
func TestPrivilegedReadOnlyFileSystem(t *testing.T) {
	testenv.Privileged(t)
	good, endpoints := realisticFile(t, 20)
	tests := []struct {
		name   string
		setup  func(t *testing.T, mount string) (stateDir string)
		advice string
	}{
		{"the agent's own state file", func(t *testing.T, mount string) string {
			write0(t, filepath.Join(mount, FileName), good)
			return mount
		}, "do not move the file aside"},
		{"an empty state directory", func(t *testing.T, mount string) string { return mount }, "make its file system writable"},
		{"a state directory yet to be made", func(t *testing.T, mount string) string { return filepath.Join(mount, "state") }, "make its file system writable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mount := t.TempDir()
			dir := tc.setup(t, mount)
			path := filepath.Join(dir, FileName)
			before, _ := os.ReadFile(path)
			var err error
			if merr := inReadOnlyMount(mount, func() error {
				var db *DB
				db, err = Open(dir, time.Second)
				if err == nil {
					db.Close()
				}
				return nil
			}); merr != nil {
				t.Fatal(merr)
			}
			checkRefusal(t, err, ErrReadOnly, path)
			if !errors.Is(err, unix.EROFS) {
				t.Errorf("error does not carry EROFS: %v", err)
			}
			if !contains(err, tc.advice) {
				t.Errorf("error does not say %q: %v", tc.advice, err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("the state file changed")
			}
		})
	}
	// The same bytes on a writable file system open with everything in them.
	dir := t.TempDir()
	write0(t, filepath.Join(dir, FileName), good)
	db := openDB(t, dir)
	defer db.Close()
	if eps, err := db.LoadEndpoints(); err != nil || len(eps) != endpoints {
		t.Fatalf("loaded %d endpoints, %v; want %d", len(eps), err, endpoints)
	}
}
