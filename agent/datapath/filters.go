//go:build linux

package datapath

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Filter is one of lockstep's tc filters, as RemoveFilters reports it.
type Filter struct {
	// Link is the interface the filter is attached to.
	Link string
	// Hook is "ingress" (what the pod sends) or "egress" (what it
	// receives).
	Hook string
	// Program is the BPF program's name, lockstep_from_pod or
	// lockstep_to_pod.
	Program string
}

// String reads "ls0123456789ab ingress filter lockstep_from_pod".
func (f Filter) String() string { return fmt.Sprintf("%s %s filter %s", f.Link, f.Hook, f.Program) }

// RemoveFilters deletes lockstep's filters from every pod host link of
// the current network namespace and returns those it deleted. A filter is
// lockstep's when its program's name starts with lockstep_ (see Attach);
// every other filter, and the clsact qdisc, which other programs may
// share, stay. It is idempotent.
func RemoveFilters() ([]Filter, error) {
	filters, err := lockstepFilters()
	errs := []error{err}
	var removed []Filter
	for _, f := range filters {
		desc := Filter{Hook: "ingress", Program: f.(*netlink.BpfFilter).Name}
		if f.Attrs().Parent == netlink.HANDLE_MIN_EGRESS {
			desc.Hook = "egress"
		}
		if link, err := netlink.LinkByIndex(f.Attrs().LinkIndex); err == nil {
			desc.Link = link.Attrs().Name
		} else {
			desc.Link = fmt.Sprintf("ifindex %d", f.Attrs().LinkIndex)
		}
		if err := netlink.FilterDel(f); err != nil {
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("delete %s: %w", desc, err))
			}
			continue
		}
		removed = append(removed, desc)
	}
	return removed, errors.Join(errs...)
}
