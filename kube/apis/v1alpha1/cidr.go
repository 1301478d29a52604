package v1alpha1

import (
	"fmt"
	"net/netip"
)

// CIDR is an address range in canonical CIDR notation: no host bits set and
// the address written as net/netip prints it ("10.244.0.0/16",
// "fd00:10:244::/56"). Canonical text is required because blocks are keys:
// spec.blocks, status.blocks and both halves of the release handshake are
// matched by this string, and "10.244.0.1/16" or "FD00::/8" would otherwise
// name the same range twice.
//
// The API server checks the form with the CEL CIDR library, which needs
// Kubernetes 1.30 or later.
//
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self) && string(cidr(self).masked()) == self",message="must be a CIDR in canonical form, such as 10.244.0.0/16 or fd00:10:244::/56"
type CIDR string

// Prefix parses c, refusing the forms the API server refuses.
func (c CIDR) Prefix() (netip.Prefix, error) {
	p, err := netip.ParsePrefix(string(c))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("parse CIDR %q: %w", string(c), err)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("parse CIDR %q: IPv4-mapped IPv6 ranges are not allowed; write the IPv4 range", string(c))
	}
	if canonical := p.Masked().String(); canonical != string(c) {
		return netip.Prefix{}, fmt.Errorf("parse CIDR %q: not in canonical form; write %s", string(c), canonical)
	}
	return p, nil
}

// CIDRFromPrefix returns p's canonical CIDR.
func CIDRFromPrefix(p netip.Prefix) CIDR {
	return CIDR(p.Masked().String())
}
