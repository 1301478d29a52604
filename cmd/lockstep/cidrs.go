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

// parseNodePortAddresses parses --nodeport-addresses as kube-proxy reads
// its own: CIDRs, or "primary" alone, the node's primary addresses: its
// Node's InternalIPs, all of which lockstep uses without the flag (nil),
// and with an empty one.
func parseNodePortAddresses(values []string) ([]netip.Prefix, error) {
	if len(values) == 0 || len(values) == 1 && strings.TrimSpace(values[0]) == "primary" {
		return nil, nil
	}
	for _, v := range values {
		if strings.TrimSpace(v) == "primary" {
			return nil, fmt.Errorf("parse --nodeport-addresses %q: primary goes alone, as kube-proxy takes it", strings.Join(values, ","))
		}
	}
	return parseCIDRs("nodeport-addresses", values)
}
