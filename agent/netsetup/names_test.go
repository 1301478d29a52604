//go:build linux

package netsetup

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestSetupArgsValidate(t *testing.T) {
	// validate never reads the handle; any open file stands in for it.
	netns, err := os.CreateTemp(t.TempDir(), "netns")
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	good := SetupArgs{
		Netns:     netns,
		HostIf:    "ls0123456789ab",
		PodIf:     "eth0",
		MTU:       1500,
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.244.0.5/24"), netip.MustParsePrefix("fd00::5/64")},
	}
	tests := []struct {
		name    string
		mutate  func(*SetupArgs)
		wantErr string
	}{
		{name: "valid", mutate: func(*SetupArgs) {}},
		{name: "no netns", mutate: func(a *SetupArgs) { a.Netns = nil }, wantErr: "no pod netns"},
		{name: "host name too long", mutate: func(a *SetupArgs) { a.HostIf = "ls0123456789abcdef" }, wantErr: "invalid host interface name"},
		{name: "pod name with '/'", mutate: func(a *SetupArgs) { a.PodIf = "eth/0" }, wantErr: "invalid pod interface name"},
		{name: "no addresses", mutate: func(a *SetupArgs) { a.Addresses = nil }, wantErr: "no addresses"},
		{name: "repeated address", mutate: func(a *SetupArgs) {
			a.Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("10.0.0.1/32")}
		}, wantErr: "given twice"},
		{name: "invalid address", mutate: func(a *SetupArgs) { a.Addresses = []netip.Prefix{{}} }, wantErr: "invalid address"},
		{name: "IPv6 below its minimum MTU", mutate: func(a *SetupArgs) { a.MTU = 1000 }, wantErr: "below the IPv6 minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := good
			tt.mutate(&args)
			addrs, err := args.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate() error = %v", err)
				}
				want := []netip.Prefix{netip.MustParsePrefix("10.244.0.5/32"), netip.MustParsePrefix("fd00::5/128")}
				if len(addrs) != 2 || addrs[0] != want[0] || addrs[1] != want[1] {
					t.Fatalf("validate() = %v, want %v", addrs, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
