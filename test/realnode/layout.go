//go:build linux

package realnode

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
)

// DefaultName is the name of the cluster `make e2e-up` and the tests bring
// up unless LOCKSTEP_E2E_NAME names another: one per name can run on a
// machine at a time.
const DefaultName = "e2e"

// NameEnv names the environment variable that picks the cluster's name.
const NameEnv = "LOCKSTEP_E2E_NAME"

// validName is what a cluster name may be: it becomes part of network
// namespace and cgroup names.
var validName = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// NameFromEnv returns the cluster name LOCKSTEP_E2E_NAME sets, or
// DefaultName.
func NameFromEnv() string {
	if n := os.Getenv(NameEnv); n != "" {
		return n
	}
	return DefaultName
}

// prefix starts the name of everything a cluster called name puts on the
// machine: network namespaces and cgroups.
func prefix(name string) string { return "ls" + name }

// DefaultDir is where a cluster called name lives unless told otherwise.
func DefaultDir(name string) string { return filepath.Join(os.TempDir(), "lockstep-"+name) }

// The link every host is plugged into, and the network behind it that
// stands for the world outside the cluster.
var (
	lanV4      = netip.MustParsePrefix("192.168.250.0/24")
	lanV6      = netip.MustParsePrefix("fd00:250::/64")
	outsideV4  = netip.MustParsePrefix("203.0.113.0/24")
	outsideV6  = netip.MustParsePrefix("fd00:203::/64")
	serviceV4  = "10.96.0.0/16"
	serviceV6  = "fd00:10:96::/108"
	clusterDNS = "10.96.0.10"
	// PodCIDRs are the ranges of deploy/examples/ippools.yaml.
	PodCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/56"}
)

// Host octets on the lan (and in the outside network for the outside host).
const (
	gatewayHost = 1   // lse2e-lan's bridge: the nodes' default gateway
	cpHost      = 10  // the control plane
	nodeHost0   = 10  // node i is nodeHost0+i
	outsideHost = 100 // the outside server
)

// APIServerPort is the API server's port on the control plane's address.
const APIServerPort = 6443

// hostAddr returns the address of host number n in p (IPv4 or IPv6).
func hostAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = byte(n)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Host is one machine of the cluster: the control plane or a node.
type Host struct {
	// Name is the Node name (e2e-node-1), or "control-plane".
	Name string
	// Netns is the name of its network namespace.
	Netns string
	// IPv4 and IPv6 are its addresses on the lan.
	IPv4, IPv6 netip.Addr
	// Dir holds its configuration, state (upper layers of its overlays,
	// containerd's root) and logs.
	Dir string
}

// CgroupName is the host's cgroup directory name in every hierarchy.
func (h Host) CgroupName() string { return h.Netns }

// LogDir holds the logs of the host's init and services.
func (h Host) LogDir() string { return filepath.Join(h.Dir, "logs") }

// Layout is where a cluster's pieces live; it is a pure function of the
// cluster's name, its directory and the number of nodes, so Down can find
// everything without the harness that brought it up.
type Layout struct {
	// Name is the cluster's name; Prefix starts its namespaces' and
	// cgroups' names.
	Name, Prefix string
	Dir          string
	ControlPlane Host
	Nodes        []Host
	// LanNetns holds the bridge and routes to OutsideNetns.
	LanNetns, OutsideNetns string
	// Outside are the addresses of the outside server.
	OutsideV4, OutsideV6 netip.Addr
}

// NewLayout returns the layout of a cluster called name of n nodes in dir.
func NewLayout(name, dir string, n int) Layout {
	p := prefix(name)
	l := Layout{
		Name:         name,
		Prefix:       p,
		Dir:          dir,
		LanNetns:     p + "-lan",
		OutsideNetns: p + "-ext",
		OutsideV4:    hostAddr(outsideV4, outsideHost),
		OutsideV6:    hostAddr(outsideV6, outsideHost),
		ControlPlane: Host{
			Name: "control-plane", Netns: p + "-cp",
			IPv4: hostAddr(lanV4, cpHost), IPv6: hostAddr(lanV6, cpHost),
			Dir: filepath.Join(dir, "control-plane"),
		},
	}
	for i := 1; i <= n; i++ {
		node := fmt.Sprintf("e2e-node-%d", i)
		l.Nodes = append(l.Nodes, Host{
			Name: node, Netns: fmt.Sprintf("%s-node-%d", p, i),
			IPv4: hostAddr(lanV4, nodeHost0+i), IPv6: hostAddr(lanV6, nodeHost0+i),
			Dir: filepath.Join(dir, node),
		})
	}
	return l
}

// Hosts returns the control plane and the nodes.
func (l Layout) Hosts() []Host { return append([]Host{l.ControlPlane}, l.Nodes...) }

// APIServerURL is the API server's address as nodes and pods reach it.
func (l Layout) APIServerURL() string {
	return fmt.Sprintf("https://%s", netip.AddrPortFrom(l.ControlPlane.IPv4, APIServerPort))
}

// Paths of the cluster directory.
func (l Layout) pkiDir() string     { return filepath.Join(l.Dir, "pki") }
func (l Layout) statePath() string  { return filepath.Join(l.Dir, "cluster.json") }
func (l Layout) imagesDir() string  { return filepath.Join(l.Dir, "images") }
func (l Layout) binDir() string     { return filepath.Join(l.Dir, "bin") }
func (l Layout) kubeconfig() string { return filepath.Join(l.Dir, "kubeconfig") }
