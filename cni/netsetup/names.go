package netsetup

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/api"
)

// HostMAC is the MAC address of every host-side veth. Pods reach their
// gateway through a permanent neighbour entry pointing at it.
var HostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// Gateways every pod routes through. They are link-local, so the same
// address can sit on every host-side veth without conflict.
var (
	GatewayV4 = netip.MustParseAddr("169.254.1.1")
	GatewayV6 = netip.MustParseAddr("fe80::1")
)

// ListHostLinks returns the names of the lockstep veths in the current
// network namespace: links of type veth whose name api.HostIfName could have
// produced (api.IsHostIfName). GC compares them against the attachments still valid.
func ListHostLinks() ([]string, error) {
	links, err := dump("links", netlink.LinkList)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		if l.Type() == "veth" && api.IsHostIfName(l.Attrs().Name) {
			names = append(names, l.Attrs().Name)
		}
	}
	return names, nil
}
