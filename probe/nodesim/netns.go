//go:build linux

package nodesim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RunDir is where named network namespaces are bind-mounted.
const RunDir = "/run/netns"

var counter atomic.Uint64

// Name returns a fresh namespace name PREFIX-PID-N for this process.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), counter.Add(1))
}

// Path returns the bind-mount path of the named namespace.
func Path(name string) string { return filepath.Join(RunDir, name) }

// Create makes a named network namespace with its loopback up and returns
// it opened. The caller owns it and must Delete it.
func Create(name string) (ns.NetNS, error) {
	if err := prepareRunDir(); err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is left in the new namespace and never unlocked, so
		// the runtime retires it when this goroutine returns.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err == nil {
			h.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	n, err := ns.GetNS(Path(name))
	if err != nil {
		_ = deleteNamed(name)
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	err = n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		_ = Delete(n)
		return nil, fmt.Errorf("bring up lo in netns %s: %w", name, err)
	}
	return n, nil
}

// prepareRunDir makes RunDir a shared mount point, as iproute2 does before
// its first `ip netns add`. Without it, a later `ip netns add` bind-mounts
// RunDir over itself and hides the namespaces created before.
func prepareRunDir() error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", RunDir, err)
	}
	err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: make it one, then shared.
		if err = unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount point: %w", RunDir, err)
	}
	return nil
}

// Delete closes and unmounts a namespace made by Create. Deleting one that
// is already gone is not an error.
func Delete(n ns.NetNS) error {
	_ = n.Close()
	return deleteNamed(filepath.Base(n.Path()))
}

// deleteNamed unmounts and removes a named namespace. A bind-mount file
// that is no longer mounted (its mount was lost, e.g. hidden by a later
// mount of RunDir) is removed too.
func deleteNamed(name string) error {
	path := Path(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// SweepStale deletes namespaces named PREFIX-PID-N whose process PID no
// longer runs, and returns how many it removed.
func SweepStale(prefix string) (int, error) {
	entries, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", RunDir, err)
	}
	removed := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := deleteNamed(e.Name()); err == nil {
			removed++
		}
	}
	return removed, nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Sysctl writes value to /proc/sys/KEY inside the namespace, e.g.
// Sysctl(node, "net/ipv4/ip_forward", "1").
func Sysctl(n ns.NetNS, key, value string) error {
	return n.Do(func(ns.NetNS) error {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			return fmt.Errorf("set sysctl %s: %w", key, err)
		}
		return nil
	})
}
