package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseNodePortAddresses(t *testing.T) {
	tests := []struct {
		values  []string
		want    []netip.Prefix
		wantErr string
	}{
		{values: []string{"primary"}},
		{values: []string{" primary "}},
		{values: []string{"192.168.0.0/16", "fd00:1::/64"}, want: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fd00:1::/64")}},
		{values: []string{"192.168.0.11/32"}, want: []netip.Prefix{netip.MustParsePrefix("192.168.0.11/32")}},
		{values: nil},
		{values: []string{"primary", "10.0.0.0/8"}, wantErr: "primary goes alone"},
		{values: []string{"10.0.0.0/8", "primary"}, wantErr: "primary goes alone"},
		{values: []string{"10.0.0.1/8", "fd00:1::11/64"}, want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00:1::/64")}},
		{values: []string{"eth0"}, wantErr: `--nodeport-addresses "eth0"`},
	}
	for _, tc := range tests {
		got, err := parseNodePortAddresses(tc.values)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseNodePortAddresses(%q) = %v, %v; want an error with %q", tc.values, got, err, tc.wantErr)
			}
		case err != nil || !slices.Equal(got, tc.want):
			t.Errorf("parseNodePortAddresses(%q) = %v, %v; want %v", tc.values, got, err, tc.want)
		}
	}
}
