package main

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/enforcer"
)

func TestParseNodePortAddresses(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		values  []string
		want    enforcer.NodePorts
		wantErr string
	}{
		{values: []string{"primary"}, want: enforcer.NodePorts{Primary: true}},
		{values: []string{" primary "}, want: enforcer.NodePorts{Primary: true}},
		{values: []string{"192.168.0.0/16", "fd00:1::/64"}, want: enforcer.NodePorts{Prefixes: []netip.Prefix{p("192.168.0.0/16"), p("fd00:1::/64")}}},
		{values: []string{"192.168.0.11/32"}, want: enforcer.NodePorts{Prefixes: []netip.Prefix{p("192.168.0.11/32")}}},
		{values: nil},
		{values: []string{""}},
		{values: []string{" "}},
		{values: []string{"primary", "10.0.0.0/8"}, wantErr: "primary goes alone"},
		{values: []string{"10.0.0.0/8", "primary"}, wantErr: "primary goes alone"},
		{values: []string{"10.0.0.1/8", "fd00:1::11/64"}, want: enforcer.NodePorts{Prefixes: []netip.Prefix{p("10.0.0.0/8"), p("fd00:1::/64")}}},
		{values: []string{"10.0.0.0/8", ""}, wantErr: `--nodeport-addresses ""`},
		{values: []string{"eth0"}, wantErr: `--nodeport-addresses "eth0"`},
	}
	for _, tc := range tests {
		got, err := parseNodePortAddresses(tc.values)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseNodePortAddresses(%q) = %v, %v; want an error with %q", tc.values, got, err, tc.wantErr)
			}
		case err != nil || !reflect.DeepEqual(got, tc.want):
			t.Errorf("parseNodePortAddresses(%q) = %+v, %v; want %+v", tc.values, got, err, tc.want)
		}
	}
}
