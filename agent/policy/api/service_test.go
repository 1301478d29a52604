package api

import (
	"net/netip"
	"slices"
	"testing"
)

// ParseAddrs keeps what parses, unmapped, each once, in order.
func TestParseAddrs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []netip.Addr
	}{
		{nil, nil},
		{[]string{"", "nope", "fe80::1%eth0", "10.0.0.1/32"}, nil},
		{[]string{"10.0.0.2", "::ffff:10.0.0.1", "10.0.0.2", "fd00::1", "10.0.0.1"},
			[]netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}},
	} {
		if got := ParseAddrs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("ParseAddrs(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
