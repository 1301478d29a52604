package netsetup

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/api"
)

// HostIfPrefix starts the name of every host-side veth lockstep creates.
const HostIfPrefix = api.HostIfPrefix

// hostIfHashLen is how many hex digits of the attachment hash follow
// HostIfPrefix; prefix and hash together fit IFNAMSIZ with room to spare.
const hostIfHashLen = 12

// HostMAC is the MAC address of every host-side veth. Pods reach their
// gateway through a permanent neighbour entry pointing at it.
var HostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// Gateways every pod routes through. They are link-local, so the same
// address can sit on every host-side veth without conflict.
var (
	GatewayV4 = netip.MustParseAddr("169.254.1.1")
	GatewayV6 = netip.MustParseAddr("fe80::1")
)

// HostIfName returns the name of the host-side veth for an attachment:
// HostIfPrefix and the first 12 hex digits of sha256(containerID/ifName).
// It is deterministic so DEL and GC can find the link without asking the
// agent. It is api.HostIfName, the one derivation agent and plugin share.
func HostIfName(containerID, ifName string) string {
	return api.HostIfName(containerID, ifName)
}

// isHostIfName reports whether name has the shape HostIfName produces.
func isHostIfName(name string) bool {
	if len(name) != len(HostIfPrefix)+hostIfHashLen || name[:len(HostIfPrefix)] != HostIfPrefix {
		return false
	}
	for _, c := range name[len(HostIfPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ListHostLinks returns the names of the lockstep veths in the current
// network namespace: links of type veth whose name HostIfName could have
// produced. GC compares them against the attachments still valid.
func ListHostLinks() ([]string, error) {
	links, err := dump("links", netlink.LinkList)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		if l.Type() == "veth" && isHostIfName(l.Attrs().Name) {
			names = append(names, l.Attrs().Name)
		}
	}
	return names, nil
}
