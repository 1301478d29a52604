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
