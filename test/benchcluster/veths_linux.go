package benchcluster

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// CreateVeths creates the LocalEndpoints veth pairs, HostIf(k) up, in the
// network namespace of the calling thread: call it inside a throwaway
// namespace (ns.Do), never the machine's.
func CreateVeths() error {
	for k := range LocalEndpoints {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: HostIf(k)}, PeerName: fmt.Sprintf("lsbp%d", k)}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("create veth %s: %w", HostIf(k), err)
		}
		if err := netlink.LinkSetUp(veth); err != nil {
			return fmt.Errorf("set %s up: %w", HostIf(k), err)
		}
	}
	return nil
}
