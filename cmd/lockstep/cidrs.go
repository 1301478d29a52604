package main

import (
	"fmt"
	"net/netip"
	"strings"
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

// parseNodePortAddresses parses --nodeport-addresses: CIDRs, read as
// kube-proxy reads its flag of that name (an address with host bits set
// names its network, 192.168.0.10/24 is 192.168.0.0/24), or "primary"
// alone, or nothing: every InternalIP of the Node (nil), which is what
// lockstep knows of the node's addresses (kube-proxy's "primary" is the
// first of each family).
func parseNodePortAddresses(values []string) ([]netip.Prefix, error) {
	if len(values) == 0 || len(values) == 1 && strings.TrimSpace(values[0]) == "primary" {
		return nil, nil
	}
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		if strings.TrimSpace(v) == "primary" {
			return nil, fmt.Errorf("parse --nodeport-addresses %q: primary goes alone; give CIDRs or primary", strings.Join(values, ","))
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("parse --nodeport-addresses %q: %w (want CIDRs such as 192.168.0.0/16, or primary)", v, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
