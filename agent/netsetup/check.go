//go:build linux

package netsetup

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Check verifies the wiring Setup builds: the host end exists, is a veth,
// is the pod end's peer and routes every pod address; the pod end exists,
// is up, has exactly the pod addresses (link-local ones aside) and default
// routes through the gateways. Differences are returned together as a
// *MismatchError; any other error means the wiring could not be read.
func Check(ctx context.Context, args CheckArgs) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check %s: %w", args.HostIf, err)
	}
	want, err := hostPrefixes(args.Addresses)
	if err != nil {
		return fmt.Errorf("check %s: %w", args.HostIf, err)
	}
	c := &checker{args: args, want: want}
	if err := c.checkHost(); err != nil {
		return err
	}
	if err := c.checkPod(); err != nil {
		return err
	}
	if len(c.diffs) > 0 {
		return &MismatchError{Diffs: c.diffs}
	}
	return nil
}

// checker accumulates the differences Check finds.
type checker struct {
	args  CheckArgs
	want  []netip.Prefix
	host  netlink.Link // nil when the host end is missing
	diffs []string
}

func (c *checker) differs(format string, args ...any) {
	c.diffs = append(c.diffs, fmt.Sprintf(format, args...))
}

func (c *checker) checkHost() error {
	name := c.args.HostIf
	link, err := linkByName(socketPerRequest, name)
	if isNotFound(err) {
		c.differs("host interface %s is missing", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up host interface %s: %w", name, err)
	}
	if link.Type() != "veth" {
		c.differs("host interface %s is a %s, not a veth", name, link.Type())
		return nil
	}
	c.host = link
	routes, err := dump("routes of "+name, func() ([]netlink.Route, error) {
		return netlink.RouteList(link, netlink.FAMILY_ALL)
	})
	if err != nil {
		return err
	}
	for _, p := range c.want {
		if !hasRouteTo(routes, p) {
			c.differs("node has no route to %s via host interface %s", p, name)
		}
	}
	return nil
}

func (c *checker) checkPod() error {
	if c.args.Netns == nil {
		c.differs("pod netns does not exist")
		return nil
	}
	h, err := handleIn(c.args.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	return c.checkPodThrough(h)
}

// checkPodThrough reads the pod end through h, a handle in the pod
// namespace.
func (c *checker) checkPodThrough(h *netlink.Handle) error {
	name, where := c.args.PodIf, c.args.Netns.Name()
	link, err := linkByName(h, name)
	if isNotFound(err) {
		c.differs("pod interface %s in %s is missing", name, where)
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up pod interface %s in %s: %w", name, where, err)
	}
	attrs := link.Attrs()
	if c.host != nil && c.host.Attrs().ParentIndex != attrs.Index {
		c.differs("pod interface %s in %s is not the peer of host interface %s", name, where, c.args.HostIf)
	}
	if attrs.Flags&net.FlagUp == 0 {
		c.differs("pod interface %s in %s is down", name, where)
	}

	addrs, err := dump("addresses of "+name, func() ([]netlink.Addr, error) {
		return h.AddrList(link, netlink.FAMILY_ALL)
	})
	if err != nil {
		return err
	}
	have := map[netip.Prefix]bool{}
	for _, a := range addrs {
		p, ok := toPrefix(a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		have[p] = true
	}
	for _, p := range c.want {
		if !have[p] {
			c.differs("pod interface %s in %s lacks address %s", name, where, p)
		}
		delete(have, p)
	}
	for p := range have {
		c.differs("pod interface %s in %s has unexpected address %s", name, where, p)
	}

	routes, err := dump("routes of "+name, func() ([]netlink.Route, error) {
		return h.RouteList(link, netlink.FAMILY_ALL)
	})
	if err != nil {
		return err
	}
	v4, v6 := families(c.want)
	for _, gw := range []struct {
		need bool
		addr netip.Addr
	}{{v4, GatewayV4}, {v6, GatewayV6}} {
		if gw.need && !hasDefaultVia(routes, gw.addr) {
			c.differs("pod interface %s in %s has no default route via %s", name, where, gw.addr)
		}
	}
	return nil
}

// hasRouteTo reports whether routes hold one to exactly p.
func hasRouteTo(routes []netlink.Route, p netip.Prefix) bool {
	for _, r := range routes {
		if dst, ok := toPrefix(r.Dst); ok && dst == p {
			return true
		}
	}
	return false
}

// hasDefaultVia reports whether routes hold a default route through gw.
func hasDefaultVia(routes []netlink.Route, gw netip.Addr) bool {
	for _, r := range routes {
		via, ok := netip.AddrFromSlice(r.Gw)
		if !ok || via.Unmap() != gw {
			continue
		}
		if r.Dst == nil {
			return true
		}
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			return true
		}
	}
	return false
}

// toPrefix converts a netlink address or destination, keeping the host
// bits.
func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	addr = addr.Unmap()
	if bits != addr.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(addr, ones), true
}
