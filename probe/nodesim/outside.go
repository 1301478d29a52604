//go:build linux

package nodesim

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Network is a link from a node namespace to a namespace that plays a
// network outside the pod network: the internet, or a routed network of
// the data centre.
type Network struct {
	// NodeIf names the node's end of the veth; the far end is eth0.
	NodeIf string
	// NodeAddrs and FarAddrs are the addresses of the two ends, with the
	// prefix length of the link (e.g. 192.0.2.1/24 and 192.0.2.2/24), one
	// per family.
	NodeAddrs, FarAddrs []netip.Prefix
	// RoutesBack are destinations the far end routes through the node's
	// address of their family, as a network that knows the pod CIDRs
	// would. Without them the far end cannot answer a pod's own address:
	// only traffic the node masquerades gets replies.
	RoutesBack []netip.Prefix
}

// ConnectNetwork links node to far as nw describes. IPv6 duplicate address
// detection is switched off in both namespaces first, so the addresses
// work at once, and the node pings each far address before it returns, so
// the link is known to work and the neighbours are resolved: a test's
// first connection does not wait for neighbour discovery.
func ConnectNetwork(node, far ns.NetNS, nw Network) error {
	for _, n := range []ns.NetNS{node, far} {
		for _, key := range []string{"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad"} {
			if err := Sysctl(n, key, "0"); err != nil {
				return err
			}
		}
	}
	err := node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nw.NodeIf}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(far.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s: %w", nw.NodeIf, err)
		}
		return configure(nw.NodeIf, nw.NodeAddrs, nil, nil)
	})
	if err != nil {
		return fmt.Errorf("connect network %s: %w", nw.NodeIf, err)
	}
	err = far.Do(func(ns.NetNS) error { return configure("eth0", nw.FarAddrs, nw.RoutesBack, nw.NodeAddrs) })
	if err != nil {
		return fmt.Errorf("connect network %s: far end: %w", nw.NodeIf, err)
	}
	for _, a := range nw.FarAddrs {
		if err := Ping(node, a.Addr(), 5*time.Second); err != nil {
			return fmt.Errorf("connect network %s: %w", nw.NodeIf, err)
		}
	}
	return nil
}

// configure gives link its addresses, brings it up, and routes each of
// routes via the address of its family among gateways.
func configure(name string, addrs, routes, gateways []netip.Prefix) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	for _, dst := range routes {
		var via netip.Addr
		for _, g := range gateways {
			if g.Addr().Is4() == dst.Addr().Is4() {
				via = g.Addr()
			}
		}
		if !via.IsValid() {
			return fmt.Errorf("route %s: no gateway of its family", dst)
		}
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}, Gw: via.AsSlice()}
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, via, err)
		}
	}
	return nil
}

// ServeWhoAmI serves TCP on addr inside n until the returned stop is
// called: it writes every client the address it connected from, as the
// server sees it, on one line, and closes the connection. A masquerading
// node shows as the node's address, a routed pod as the pod's own.
func ServeWhoAmI(n ns.NetNS, addr netip.AddrPort) (stop func(), err error) {
	var l net.Listener
	err = n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = fmt.Fprintln(c, from.Addr().Unmap())
			_ = c.Close()
		}
	}()
	return func() { l.Close(); <-done }, nil
}

// ErrNoAnswer is WhoAmI's error when the connection could not be made or
// answered in time: the server's replies never made it back.
var ErrNoAnswer = errors.New("no answer")

// WhoAmI connects from inside n to a ServeWhoAmI server at addr and
// returns the address the server saw. It fails with ErrNoAnswer when no
// connection is made within timeout.
func WhoAmI(n ns.NetNS, addr netip.AddrPort, timeout time.Duration) (netip.Addr, error) {
	var seen netip.Addr
	err := n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr.String(), timeout)
		if err != nil {
			return fmt.Errorf("connect to %s: %w (%w)", addr, ErrNoAnswer, err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("read from %s: %w (%w)", addr, ErrNoAnswer, err)
		}
		seen, err = netip.ParseAddr(strings.TrimSpace(line))
		return err
	})
	return seen, err
}
