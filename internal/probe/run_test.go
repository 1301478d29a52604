//go:build linux

package probe

import (
	"slices"
	"strings"
	"testing"
)

func TestWithDefaultsFamily(t *testing.T) {
	tests := []struct {
		name      string
		family    string
		pools     []string
		wantPools []string
		wantErr   string
	}{
		{name: "default", wantPools: []string{DefaultPool}},
		{name: "ipv4", family: IPv4, pools: []string{"10.0.0.0/24"}, wantPools: []string{"10.0.0.0/24"}},
		{name: "ipv6 adds a pool", family: IPv6, wantPools: []string{DefaultPool, DefaultPool6}},
		{name: "ipv6 in lower case", family: "ipv6", wantPools: []string{DefaultPool, DefaultPool6}},
		{name: "6", family: "6", wantPools: []string{DefaultPool, DefaultPool6}},
		{name: "ipv6 keeps its pool", family: IPv6, pools: []string{"10.0.0.0/24", "fd00:1::/120"}, wantPools: []string{"10.0.0.0/24", "fd00:1::/120"}},
		{name: "unknown family", family: "ipv5", wantErr: `IP family "ipv5": want IPv4 or IPv6`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pools := slices.Clone(tc.pools)
			got, err := withDefaults(Config{Family: tc.family, Pools: pools})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("withDefaults: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Pools, tc.wantPools) {
				t.Errorf("pools %v, want %v", got.Pools, tc.wantPools)
			}
			if !slices.Equal(pools, tc.pools) {
				t.Errorf("the caller's pools changed to %v", pools)
			}
			if got.Family != IPv4 && got.Family != IPv6 {
				t.Errorf("family %q", got.Family)
			}
		})
	}
}
