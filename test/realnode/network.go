//go:build linux

package realnode

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/probe/nodesim"
)

// bridgeName is the lan's bridge inside LanNetns.
const bridgeName = "br0"

// createNetwork makes the lan (a bridge with the gateway addresses), one
// namespace per host plugged into it with eth0, and the outside network
// routed behind the lan.
func createNetwork(l Layout) error {
	lan, err := nodesim.Create(l.LanNetns)
	if err != nil {
		return err
	}
	defer lan.Close()
	err = lan.Do(func(ns.NetNS) error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName}}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("add bridge: %w", err)
		}
		if err := addAddrs(br, hostAddr(lanV4, gatewayHost), lanV4.Bits(), hostAddr(lanV6, gatewayHost), lanV6.Bits()); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(br); err != nil {
			return err
		}
		for _, k := range []string{"ipv4/ip_forward", "ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(filepath.Join("/proc/sys/net", k), []byte("1"), 0o644); err != nil {
				return fmt.Errorf("enable forwarding: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set up lan: %w", err)
	}
	for i, h := range l.Hosts() {
		if err := plugHost(lan, h.Netns, fmt.Sprintf("h%d", i), h.IPv4, h.IPv6); err != nil {
			return err
		}
	}
	// The outside network: a /24 (and /64) routed by the lan, with one
	// server in it that has no route to the pods' ranges.
	ext, err := nodesim.Create(l.OutsideNetns)
	if err != nil {
		return err
	}
	defer ext.Close()
	return connect(lan, "ext", ext, "eth0",
		func(lanSide netlink.Link) error {
			return addAddrs(lanSide, hostAddr(outsideV4, gatewayHost), outsideV4.Bits(), hostAddr(outsideV6, gatewayHost), outsideV6.Bits())
		},
		func(eth0 netlink.Link) error {
			if err := addAddrs(eth0, l.OutsideV4, outsideV4.Bits(), l.OutsideV6, outsideV6.Bits()); err != nil {
				return err
			}
			return defaultRoutes(eth0, hostAddr(outsideV4, gatewayHost), hostAddr(outsideV6, gatewayHost))
		})
}

// plugHost creates the host's namespace and its eth0, plugged into the lan
// bridge as port, with the host's addresses and default routes via the
// lan's gateway.
func plugHost(lan ns.NetNS, netnsName, port string, v4, v6 netip.Addr) error {
	host, err := nodesim.Create(netnsName)
	if err != nil {
		return err
	}
	defer host.Close()
	return connect(lan, port, host, "eth0",
		func(p netlink.Link) error {
			br, err := netlink.LinkByName(bridgeName)
			if err != nil {
				return err
			}
			return netlink.LinkSetMaster(p, br)
		},
		func(eth0 netlink.Link) error {
			if err := addAddrs(eth0, v4, lanV4.Bits(), v6, lanV6.Bits()); err != nil {
				return err
			}
			return defaultRoutes(eth0, hostAddr(lanV4, gatewayHost), hostAddr(lanV6, gatewayHost))
		})
}

// connect makes a veth pair between two namespaces (aName in a, bName in
// b), brings both ends up and configures each.
func connect(a ns.NetNS, aName string, b ns.NetNS, bName string, setA, setB func(netlink.Link) error) error {
	tmp := "lse2e-" + aName
	err := a.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName, MTU: 1500}, PeerName: tmp,
			PeerNamespace: netlink.NsFd(int(b.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s: %w", aName, err)
		}
		l, err := netlink.LinkByName(aName)
		if err != nil {
			return err
		}
		if err := setA(l); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		return err
	}
	return b.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(tmp)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, bName); err != nil {
			return fmt.Errorf("rename %s: %w", tmp, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return setB(l)
	})
}

// addAddrs puts an IPv4 and an IPv6 address on l (IPv6 without duplicate
// address detection, so it is usable at once).
func addAddrs(l netlink.Link, v4 netip.Addr, v4bits int, v6 netip.Addr, v6bits int) error {
	for _, a := range []struct {
		ip   netip.Addr
		bits int
	}{{v4, v4bits}, {v6, v6bits}} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.ip.AsSlice(), Mask: net.CIDRMask(a.bits, a.ip.BitLen())}}
		if a.ip.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a.ip, l.Attrs().Name, err)
		}
	}
	return nil
}

// defaultRoutes routes everything else via the gateways.
func defaultRoutes(l netlink.Link, gw4, gw6 netip.Addr) error {
	for _, gw := range []netip.Addr{gw4, gw6} {
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()}
		if gw.Is4() {
			r.Dst = &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}
		} else {
			r.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		}
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("add default route via %s: %w", gw, err)
		}
	}
	return nil
}

// deleteNetworks removes every namespace whose name starts with prefix-:
// they are all the cluster's, whoever made them.
func deleteNetworks(prefix string) error {
	entries, err := os.ReadDir(nodesim.RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list network namespaces: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix+"-") {
			continue
		}
		n, err := ns.GetNS(nodesim.Path(e.Name()))
		if err != nil {
			// Not a namespace any more: remove the file.
			if rerr := os.Remove(nodesim.Path(e.Name())); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				errs = append(errs, rerr)
			}
			continue
		}
		if err := nodesim.Delete(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clusterNetns lists the names of the cluster's namespaces that exist.
func clusterNetns(prefix string) []string {
	entries, _ := os.ReadDir(nodesim.RunDir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}
