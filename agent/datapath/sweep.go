//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// programPrefix starts the name of every program lockstep attaches; a
// filter whose program name starts with it is lockstep's.
const programPrefix = "lockstep_"

// Leftovers counts what the eBPF dataplane left in the current network
// namespace and under pinRoot: lockstep filters on pod host links,
// from_uplink's pinned links and pinned bpfmaps. An agent that switched to another dataplane uses it to tell
// whether a clean-up is owed.
func Leftovers(pinRoot string) (int, error) {
	filters, err := lockstepFilters()
	n := len(filters)
	uplinks, uerr := pinnedUplinks(filepath.Join(pinRoot, uplinkDir))
	n += len(uplinks)
	err = errors.Join(err, uerr)
	for _, name := range bpfmaps.Names {
		if _, serr := os.Stat(filepath.Join(pinRoot, name)); serr == nil {
			n++
		}
	}
	return n, err
}

// Sweep removes everything the eBPF dataplane left behind: lockstep's
// filters on every pod host link of the current network namespace, then
// from_uplink's links and the maps pinned under pinRoot. It is idempotent and returns nil only when
// nothing is left. Use it when the node no longer runs the eBPF dataplane;
// a running Datapath uses Detach and Unpin.
func Sweep(pinRoot string) error {
	_, err := RemoveFilters()
	if err != nil {
		err = fmt.Errorf("sweep eBPF dataplane: %w", err)
	}
	errs := []error{err, Remove(pinRoot)}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	left, err := Leftovers(pinRoot)
	if err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("sweep eBPF dataplane: %d filters, uplink links or pinned maps still present", left)
	}
	return nil
}

// lockstepFilters lists the filters lockstep attached to pod host links.
func lockstepFilters() ([]netlink.Filter, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []netlink.Filter
	var errs []error
	for _, l := range links {
		if !api.IsHostIfName(l.Attrs().Name) {
			continue
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			fs, err := netlink.FilterList(l, parent)
			if err != nil {
				if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENODEV) {
					errs = append(errs, fmt.Errorf("list filters of %s: %w", l.Attrs().Name, err))
				}
				continue
			}
			for _, f := range fs {
				if bf, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(bf.Name, programPrefix) {
					out = append(out, f)
				}
			}
		}
	}
	return out, errors.Join(errs...)
}
