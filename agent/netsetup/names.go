//go:build linux

package netsetup

import (
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/api"
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
