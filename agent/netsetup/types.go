package netsetup

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
)

// Errors Setup wraps so callers can tell a conflict from a kernel failure.
var (
	// ErrRouteTaken: the node already routes a pod address through another
	// link, typically a pod that was never deleted.
	ErrRouteTaken = errors.New("another link already routes this address")
	// ErrInvalidArgs marks a Setup refused before it touched the kernel:
	// arguments the runtime's config or the agent got wrong (an MTU too
	// small for IPv6, no address), not something the kernel refused.
	ErrInvalidArgs = errors.New("invalid pod wiring")
	// ErrPodIfExists: the pod namespace already has an interface with the
	// requested name.
	ErrPodIfExists = errors.New("pod interface name already taken in the pod netns")
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

// SetupArgs describes one pod attachment to wire.
type SetupArgs struct {
	// Netns is an open handle on the pod's network namespace (an nsfs
	// file, as opening CNI_NETNS gives). Setup never opens a path: the
	// agent that wires pods gets the handle from the plugin, so it needs
	// no view of the runtime's namespace mounts. Its Name appears in
	// errors.
	Netns *os.File
	// HostIf names the host end, normally api.HostIfName(containerID, ifName).
	HostIf string
	// PodIf names the pod end, the runtime's CNI_IFNAME.
	PodIf string
	// MTU applies to both ends; 0 keeps the kernel default.
	MTU int
	// Addresses are the pod's addresses. Only the address matters: each is
	// wired as a /32 or /128.
	Addresses []netip.Prefix
}

// Link identifies one end of the veth pair.
type Link struct {
	Name string
	MAC  net.HardwareAddr
	// Index is the interface index inside the end's own namespace.
	Index int
}

// Wired is what Setup built, enough for a CNI result.
type Wired struct {
	Host Link
	Pod  Link
	// Addresses are the pod addresses as configured: /32 and /128.
	Addresses []netip.Prefix
}

// CheckArgs describes the wiring Check expects to find.
type CheckArgs struct {
	// Netns is an open handle on the pod's network namespace, as for
	// Setup; nil when the namespace no longer exists, which Check reports
	// as a difference.
	Netns *os.File
	// HostIf and PodIf name the two ends of the pod's veth.
	HostIf string
	PodIf  string
	// Addresses are the pod's addresses; like Setup, Check only looks at
	// the address and expects it as a /32 or /128.
	Addresses []netip.Prefix
}

// MismatchError lists every way the node and pod wiring differ from what
// Check expected, one sentence per difference.
type MismatchError struct {
	Diffs []string
}

// Error joins the differences.
func (e *MismatchError) Error() string { return strings.Join(e.Diffs, "; ") }
