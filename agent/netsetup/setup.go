//go:build linux

package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// minMTUv6 is the smallest MTU on which the kernel keeps IPv6 enabled.
const minMTUv6 = 1280

// Setup creates the veth pair for one attachment and configures both ends:
// addresses, gateway routes and permanent gateway neighbours inside the pod,
// the link-local gateways and one host route per pod address on the node.
// A host link left by an earlier, interrupted ADD under the same name is
// deleted first. If anything fails once the pair exists, Setup deletes the
// host end, which removes the pod end too, before returning the error.
func Setup(ctx context.Context, args SetupArgs) (_ *Wired, err error) {
	addrs, err := args.validate()
	if err != nil {
		return nil, err
	}
	podNS := int(args.Netns.Fd())
	where := args.Netns.Name()

	// One netlink socket per side for every request of this ADD. The pod
	// side's socket is opened inside the pod namespace on a thread that
	// is then discarded (handleIn), so no thread that runs our goroutines
	// ever changes namespace.
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket: %w", err)
	}
	defer host.Close()
	pod, err := handleIn(args.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()

	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:         args.HostIf,
			MTU:          args.MTU,
			HardwareAddr: HostMAC,
			Flags:        net.FlagUp,
		},
		PeerName:      args.PodIf,
		PeerNamespace: netlink.NsFd(podNS),
	}
	if err := createVeth(ctx, host, pod, veth, args); err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			return
		}
		if delErr := host.LinkDel(veth); delErr != nil && !errors.Is(delErr, unix.ENODEV) {
			err = fmt.Errorf("%w (and roll back: delete host interface %s: %v)", err, args.HostIf, delErr)
		}
	}()

	// The two ends are independent once the pair exists: wire them at
	// the same time, each through its own socket.
	hostErr := make(chan error, 1)
	go func() { hostErr <- wireHost(host, veth, addrs) }()
	podLink, podErr := wirePod(pod, args.PodIf, addrs)
	if err := <-hostErr; err != nil {
		return nil, err
	}
	if podErr != nil {
		return nil, fmt.Errorf("wire pod interface %s in %s: %w", args.PodIf, where, podErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wire %s: %w", args.HostIf, err)
	}
	return &Wired{
		Host:      Link{Name: args.HostIf, MAC: HostMAC, Index: veth.Index},
		Pod:       podLink,
		Addresses: addrs,
	}, nil
}

// createVeth creates the pair, the pod end directly in the pod namespace.
// A host link left under the same name by an earlier, interrupted ADD is
// deleted and the creation retried once.
func createVeth(ctx context.Context, host, pod *netlink.Handle, veth *netlink.Veth, args SetupArgs) error {
	err := host.LinkAdd(veth)
	if errors.Is(err, unix.EEXIST) {
		if _, lookupErr := linkByName(host, args.HostIf); lookupErr == nil {
			if err := teardown(host, args.HostIf); err != nil {
				return fmt.Errorf("remove stale host interface: %w", err)
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("wire %s: %w", args.HostIf, err)
			}
			err = host.LinkAdd(veth)
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EEXIST) {
		if _, lookupErr := linkByName(pod, args.PodIf); lookupErr == nil {
			return fmt.Errorf("create veth %s: %s in %s: %w", args.HostIf, args.PodIf, args.Netns.Name(), ErrPodIfExists)
		}
	}
	return fmt.Errorf("create veth %s with peer %s in %s: %w", args.HostIf, args.PodIf, args.Netns.Name(), err)
}

// validate checks args and returns the pod addresses as host prefixes; its
// errors wrap ErrInvalidArgs.
func (a SetupArgs) validate() ([]netip.Prefix, error) {
	addrs, err := a.check()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	return addrs, nil
}

func (a SetupArgs) check() ([]netip.Prefix, error) {
	switch {
	case a.Netns == nil:
		return nil, errors.New("wire pod: no pod netns given")
	case !validIfName(a.HostIf):
		return nil, fmt.Errorf("wire pod: invalid host interface name %q", a.HostIf)
	case !validIfName(a.PodIf):
		return nil, fmt.Errorf("wire pod: invalid pod interface name %q", a.PodIf)
	case a.MTU < 0:
		return nil, fmt.Errorf("wire pod: invalid MTU %d", a.MTU)
	case len(a.Addresses) == 0:
		return nil, errors.New("wire pod: no addresses given")
	}
	addrs, err := hostPrefixes(a.Addresses)
	if err != nil {
		return nil, fmt.Errorf("wire pod: %w", err)
	}
	if _, v6 := families(addrs); v6 && a.MTU > 0 && a.MTU < minMTUv6 {
		return nil, fmt.Errorf("wire pod: MTU %d is below the IPv6 minimum %d, so IPv6 addresses cannot be used", a.MTU, minMTUv6)
	}
	return addrs, nil
}

// hostPrefixes turns pod addresses into the /32 and /128 prefixes wired on
// the pod interface, rejecting invalid and repeated addresses.
func hostPrefixes(in []netip.Prefix) ([]netip.Prefix, error) {
	addrs := make([]netip.Prefix, 0, len(in))
	seen := map[netip.Addr]bool{}
	for _, p := range in {
		addr := p.Addr().Unmap()
		if !addr.IsValid() {
			return nil, fmt.Errorf("invalid address %q", p)
		}
		if seen[addr] {
			return nil, fmt.Errorf("address %s given twice", addr)
		}
		seen[addr] = true
		addrs = append(addrs, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return addrs, nil
}

// validIfName reports whether the kernel accepts name as an interface name.
func validIfName(name string) bool {
	if name == "" || len(name) >= unix.IFNAMSIZ || name == "." || name == ".." {
		return false
	}
	for _, c := range name {
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// wireHost configures the host end, created up: gateway addresses and a
// route per pod address.
func wireHost(h *netlink.Handle, veth *netlink.Veth, addrs []netip.Prefix) error {
	name := veth.Name
	v4, v6 := families(addrs)
	if v4 {
		gw := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(GatewayV4, 32)), Scope: unix.RT_SCOPE_LINK}
		if err := h.AddrAdd(veth, gw); err != nil {
			return fmt.Errorf("add gateway %s to host interface %s: %w", GatewayV4, name, err)
		}
	}
	if v6 {
		gw := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(GatewayV6, 64)), Flags: unix.IFA_F_NODAD}
		if err := h.AddrAdd(veth, gw); err != nil {
			return fmt.Errorf("add gateway %s to host interface %s: %w", GatewayV6, name, err)
		}
	}
	for _, p := range addrs {
		route := &netlink.Route{LinkIndex: veth.Index, Dst: ipNet(p)}
		if p.Addr().Is4() {
			route.Scope = netlink.SCOPE_LINK
		}
		if err := h.RouteAdd(route); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add host route %s dev %s: %w", p, name, ErrRouteTaken)
			}
			return fmt.Errorf("add host route %s dev %s: %w", p, name, err)
		}
	}
	return nil
}

// wirePod configures the pod end through a handle opened in the pod
// namespace: up,
// addresses, the gateway route and neighbour per family, default routes.
func wirePod(h *netlink.Handle, name string, addrs []netip.Prefix) (Link, error) {
	link, err := linkByName(h, name)
	if err != nil {
		return Link{}, fmt.Errorf("look up %s: %w", name, err)
	}
	attrs := link.Attrs()
	pod := Link{Name: name, MAC: attrs.HardwareAddr, Index: attrs.Index}
	if err := h.LinkSetUp(link); err != nil {
		return pod, fmt.Errorf("set %s up: %w", name, err)
	}
	for _, p := range addrs {
		addr := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			// Skip duplicate address detection: the address is the
			// agent's to hand out, and DAD would keep it unusable for a
			// second or more.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, addr); err != nil {
			return pod, fmt.Errorf("add address %s: %w", p, err)
		}
	}
	v4, v6 := families(addrs)
	if v4 {
		gwRoute := &netlink.Route{LinkIndex: attrs.Index, Dst: ipNet(netip.PrefixFrom(GatewayV4, 32)), Scope: netlink.SCOPE_LINK}
		if err := h.RouteAdd(gwRoute); err != nil {
			return pod, fmt.Errorf("add route %s dev %s: %w", GatewayV4, name, err)
		}
		if err := addGateway(h, link, GatewayV4, netip.MustParsePrefix("0.0.0.0/0")); err != nil {
			return pod, err
		}
	}
	if v6 {
		if err := addGateway(h, link, GatewayV6, netip.MustParsePrefix("::/0")); err != nil {
			return pod, err
		}
	}
	return pod, nil
}

// addGateway pins gw's MAC to HostMAC with a permanent neighbour entry and
// adds the default route through it.
func addGateway(h *netlink.Handle, link netlink.Link, gw netip.Addr, def netip.Prefix) error {
	name, index := link.Attrs().Name, link.Attrs().Index
	family := netlink.FAMILY_V4
	if gw.Is6() {
		family = netlink.FAMILY_V6
	}
	neigh := &netlink.Neigh{
		LinkIndex:    index,
		Family:       family,
		State:        netlink.NUD_PERMANENT,
		IP:           gw.AsSlice(),
		HardwareAddr: HostMAC,
	}
	if err := h.NeighAdd(neigh); err != nil {
		return fmt.Errorf("add neighbour %s lladdr %s dev %s: %w", gw, HostMAC, name, err)
	}
	route := &netlink.Route{LinkIndex: index, Dst: ipNet(def), Gw: gw.AsSlice()}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("add default route via %s dev %s: %w", gw, name, err)
	}
	return nil
}

// Teardown deletes the host end of a pod's veth, which takes the pod end and
// every route through either end with it. A missing link is success, so DEL
// can call it as often as it likes. A link of that name that is not a veth
// is left alone and reported.
func Teardown(hostIf string) error { return teardown(socketPerRequest, hostIf) }

func teardown(h *netlink.Handle, hostIf string) error {
	link, err := linkByName(h, hostIf)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("look up host interface %s: %w", hostIf, err)
	}
	if link.Type() != "veth" {
		return fmt.Errorf("delete host interface %s: it is a %s, not a lockstep veth; rename or remove it by hand", hostIf, link.Type())
	}
	if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete host interface %s: %w", hostIf, err)
	}
	return nil
}

// families reports which address families addrs holds.
func families(addrs []netip.Prefix) (v4, v6 bool) {
	for _, p := range addrs {
		if p.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

// ipNet converts p to the net.IPNet netlink wants, keeping the address
// bits (not the masked network).
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
