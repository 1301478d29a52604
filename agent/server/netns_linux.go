package server

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// verifyNetns checks that f, a descriptor a client passed, is a handle on
// a network namespace (nsfs, of type CLONE_NEWNET) other than the agent's
// own: a descriptor is never trusted for being what its request says.
// Wiring a pod into the agent's own namespace would put the pod end and
// its routes on the node itself.
func verifyNetns(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("inspect descriptor: %w", err)
	}
	var st unix.Stat_t
	var verr error
	err = raw.Control(func(fd uintptr) {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(int(fd), &fs); err != nil {
			verr = fmt.Errorf("statfs: %w", err)
			return
		}
		if fs.Type != unix.NSFS_MAGIC {
			verr = errors.New("it is not a namespace handle (nsfs)")
			return
		}
		kind, err := unix.IoctlRetInt(int(fd), unix.NS_GET_NSTYPE)
		if err != nil {
			verr = fmt.Errorf("read namespace type: %w", err)
			return
		}
		if kind != unix.CLONE_NEWNET {
			verr = errors.New("it is a namespace, not a network namespace")
			return
		}
		if err := unix.Fstat(int(fd), &st); err != nil {
			verr = fmt.Errorf("stat: %w", err)
		}
	})
	if err == nil {
		err = verr
	}
	if err != nil {
		return err
	}
	// The calling thread's namespace, not /proc/self's: that one is the
	// main thread's, and the Go runtime never runs goroutines again on a
	// main thread that a goroutine left locked (one that entered a pod's
	// namespace to be discarded), so it can be stuck in a pod's namespace
	// while every thread that serves requests is the agent's.
	var own unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &own); err != nil {
		return fmt.Errorf("stat the agent's own network namespace: %w", err)
	}
	if st.Dev == own.Dev && st.Ino == own.Ino {
		return errors.New("it is the node's own network namespace, where the agent runs")
	}
	return nil
}
