package bpffs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// mountOptions are systemd's for /sys/fs/bpf: only root may pin.
const mountOptions = "mode=0700"

// On reports whether path is on a bpffs. A path that does not exist is not.
func On(path string) (bool, error) {
	var st unix.Statfs_t
	err := unix.Statfs(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat file system of %s: %w", path, err)
	}
	return st.Type == unix.BPF_FS_MAGIC, nil
}

// Mount mounts a bpffs at dir, creating dir if it is missing, unless dir is
// already on one. It reports whether it mounted.
func Mount(dir string) (bool, error) {
	on, err := On(dir)
	if err != nil || on {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create bpffs mount point %s: %w", dir, err)
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, mountOptions); err != nil {
		return false, fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	return true, nil
}

// EnsureRoot makes root a directory on a bpffs. When neither root nor its
// parent is on one, it mounts a bpffs at the parent first and returns where
// it mounted; otherwise it returns "". A root whose parent is / is refused
// rather than mount over the root file system.
func EnsureRoot(root string) (mountedAt string, err error) {
	root = filepath.Clean(root)
	if on, err := On(root); err != nil || on {
		return "", err
	}
	parent := filepath.Dir(root)
	on, err := On(parent)
	if err != nil {
		return "", err
	}
	if !on {
		if parent == "/" || parent == "." {
			return "", fmt.Errorf("mount bpffs for %s: its parent %s would be mounted over; put the pin root in a directory of its own, e.g. /sys/fs/bpf/lockstep", root, parent)
		}
		if _, err := Mount(parent); err != nil {
			return "", fmt.Errorf("%w (mount one there or pick a --bpf-root on a bpffs)", err)
		}
		mountedAt = parent
	}
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return mountedAt, fmt.Errorf("create pin root %s: %w", root, err)
	}
	if on, err := On(root); err != nil || !on {
		if err == nil {
			err = fmt.Errorf("pin root %s is not on a bpffs although %s is: another file system is mounted there; unmount it or pick another --bpf-root", root, parent)
		}
		return mountedAt, err
	}
	return mountedAt, nil
}

// MountInNamespace runs Mount(dir) inside the mount namespace at nsPath (a
// /proc/PID/ns/mnt file), so the mount belongs to that namespace, not the
// caller's.
//
// setns(CLONE_NEWNS) fails in a multi-threaded process unless the thread
// has an fs_struct of its own, so the work runs on a locked OS thread that
// first unshares CLONE_FS. That thread is never unlocked: it has left the
// process's mount namespace, and the runtime ends it with its goroutine
// rather than let another goroutine run there.
func MountInNamespace(nsPath, dir string) (bool, error) {
	type result struct {
		mounted bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("open mount namespace %s: %w", nsPath, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- result{err: fmt.Errorf("unshare the file system attributes of this thread: %w", err)}
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			done <- result{err: fmt.Errorf("enter mount namespace %s: %w (is it a mount namespace, and is this process privileged?)", nsPath, err)}
			return
		}
		mounted, err := Mount(dir)
		done <- result{mounted, err}
	}()
	r := <-done
	return r.mounted, r.err
}
