package main

import (
	"fmt"
	"net/netip"
	"strings"

	"lockstep.dev/lockstep/agent/enforcer"
)

// parseCIDRs parses the values of a repeatable CIDR flag, refusing host
// bits so that a typo does not silently widen or move a range.
func parseCIDRs(flag string, values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("parse --%s %q: %w (want a CIDR such as 10.0.0.0/8)", flag, v, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("parse --%s %q: host bits set; did you mean %s?", flag, v, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// parseNodePortAddresses parses --nodeport-addresses as kube-proxy reads
// its flag of that name: CIDRs (an address with host bits set names its
// network, 192.168.0.10/24 is 192.168.0.0/24); "primary" alone, the
// node's first address of each family; or nothing, all of them:
// kube-proxy then serves NodePorts on every local address, lockstep
// translates them on every InternalIP of the Node, which is what it knows
// of the node's addresses.
func parseNodePortAddresses(values []string) (enforcer.NodePorts, error) {
	if len(values) == 1 && strings.TrimSpace(values[0]) == "primary" {
		return enforcer.NodePorts{Primary: true}, nil
	}
	if len(values) == 1 && strings.TrimSpace(values[0]) == "" {
		return enforcer.NodePorts{}, nil
	}
	var out enforcer.NodePorts
	for _, v := range values {
		if strings.TrimSpace(v) == "primary" {
			return enforcer.NodePorts{}, fmt.Errorf("parse --nodeport-addresses %q: primary goes alone; give CIDRs or primary", strings.Join(values, ","))
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return enforcer.NodePorts{}, fmt.Errorf("parse --nodeport-addresses %q: %w (want CIDRs such as 192.168.0.0/16, primary, or nothing)", v, err)
		}
		out.Prefixes = append(out.Prefixes, p.Masked())
	}
	return out, nil
}
