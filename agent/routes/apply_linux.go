package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Apply makes lockstep's routes in the main table of the calling thread's
// network namespace exactly desired: it adds the missing ones, replaces
// its own whose next hop changed, and deletes its own that are no longer
// desired. Routes of any other protocol are never changed (see the package
// documentation). It goes on past a failed route and returns the errors
// joined, with what it did change.
func Apply(desired []Route) (Result, error) {
	var res Result
	have, err := List()
	if err != nil {
		return res, err
	}
	own := make(map[netip.Prefix]Route, len(have))
	for _, r := range have {
		own[r.Dst] = r
	}
	var errs []error
	want := make(map[netip.Prefix]bool, len(desired))
	for _, r := range desired {
		want[r.Dst] = true
		cur, ok := own[r.Dst]
		switch {
		case ok && cur.Via == r.Via:
			continue
		case ok:
			if err := netlink.RouteReplace(kernelRoute(r)); err != nil {
				errs = append(errs, fmt.Errorf("replace route %s: %w", r, err))
				continue
			}
			res.Replaced = append(res.Replaced, r)
		default:
			err := netlink.RouteAdd(kernelRoute(r))
			if errors.Is(err, unix.EEXIST) {
				res.Conflicts = append(res.Conflicts, r)
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("add route %s: %w", r, err))
				continue
			}
			res.Added = append(res.Added, r)
		}
	}
	for _, r := range have {
		if want[r.Dst] {
			continue
		}
		if err := netlink.RouteDel(kernelRoute(r)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
			continue
		}
		res.Removed = append(res.Removed, r)
	}
	return res, errors.Join(errs...)
}

// List returns lockstep's routes in the main table of the calling thread's
// network namespace, both families. Node is empty: the kernel does not
// know it.
func List() ([]Route, error) {
	filter := &netlink.Route{Protocol: netlink.RouteProtocol(Protocol), Table: unix.RT_TABLE_MAIN}
	mask := netlink.RT_FILTER_PROTOCOL | netlink.RT_FILTER_TABLE
	var list []netlink.Route
	var err error
	// A dump interrupted by a concurrent change is incomplete: ask again.
	for range 5 {
		list, err = netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list routes of protocol %d: %w", Protocol, err)
	}
	out := make([]Route, 0, len(list))
	for _, r := range list {
		if r.Dst == nil {
			continue
		}
		dst, ok := prefixOf(r.Dst)
		via, okVia := netip.AddrFromSlice(r.Gw)
		if !ok || !okVia {
			// Not a shape lockstep writes; still its own, so Apply
			// deletes it when nothing wants its destination.
			via = netip.Addr{}
		}
		if ok {
			out = append(out, Route{Dst: dst, Via: via.Unmap()})
		}
	}
	return out, nil
}

// kernelRoute is r as netlink writes it: the device is left to the kernel,
// which resolves the next hop on the link that reaches it.
func kernelRoute(r Route) *netlink.Route {
	bits := 32
	if r.Dst.Addr().Is6() {
		bits = 128
	}
	kr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), bits)},
		Protocol: netlink.RouteProtocol(Protocol),
		Table:    unix.RT_TABLE_MAIN,
	}
	if r.Via.IsValid() {
		kr.Gw = r.Via.AsSlice()
	}
	return kr
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	if len(n.Mask) == net.IPv4len {
		a = a.Unmap()
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), true
}
