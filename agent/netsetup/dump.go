//go:build linux

package netsetup

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds how often a netlink dump is repeated when the kernel
// flags it as interrupted (NLM_F_DUMP_INTR: the table changed mid-dump).
const dumpAttempts = 5

// dump runs list until it returns a consistent result. An interrupted dump
// is harmless to retry; on a busy node, with pods coming and going, it is
// expected now and then.
func dump[T any](what string, list func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpAttempts {
		var out []T
		out, err = list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", what, err)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("list %s: still interrupted after %d attempts: %w", what, dumpAttempts, err)
}

// socketPerRequest is a netlink handle without sockets of its own: each
// request opens one in the calling thread's namespace, like the package
// level netlink functions.
var socketPerRequest = &netlink.Handle{}

// linkByName looks a link up by name through h, retrying an interrupted
// lookup (the kernel may fall back to a dump for long names).
func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	var err error
	for range dumpAttempts {
		var link netlink.Link
		link, err = h.LinkByName(name)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return link, err
		}
	}
	return nil, err
}

// isNotFound reports whether err says a link does not exist.
func isNotFound(err error) bool {
	var notFound netlink.LinkNotFoundError
	return errors.As(err, &notFound)
}

// handleIn returns a netlink handle whose sockets live in the namespace
// podNS is a handle on. The netlink library opens them by moving a
// locked thread into the namespace and back; should the move back fail,
// it would unlock a thread left in the pod's namespace, and a long-lived
// agent would run other goroutines there. So the library runs on a
// goroutine that locks its thread and never unlocks it: the runtime ends
// the thread with the goroutine, whatever namespace it is in.
func handleIn(podNS *os.File) (*netlink.Handle, error) {
	type result struct {
		h   *netlink.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		h, err := netlink.NewHandleAt(netns.NsHandle(int(podNS.Fd())), unix.NETLINK_ROUTE)
		done <- result{h, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, fmt.Errorf("open netlink socket in %s: %w", podNS.Name(), r.err)
	}
	return r.h, nil
}
