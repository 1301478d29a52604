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

func TestWithDefaultsVia(t *testing.T) {
	pods := []Pod{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}}
	web := []Service{{Namespace: "x", Name: "web", Ports: []Port{{80, TCP}}}}
	tests := []struct {
		name     string
		via      string
		pods     []Pod
		services []Service
		want     string
		wantErr  string
	}{
		{name: "no services: pod-ip", pods: pods, want: ViaPodIP},
		{name: "services: both", pods: pods, services: web, want: ViaBoth},
		{name: "pod-ip asked with services", via: ViaPodIP, pods: pods, services: web, want: ViaPodIP},
		{name: "service only, one pod", via: ViaService, pods: pods[:1], services: web, want: ViaService},
		{name: "unknown", via: "clusterip", pods: pods, wantErr: `probe via "clusterip": want pod-ip, service or both`},
		{name: "service without services", via: ViaService, pods: pods, wantErr: "no Services to probe"},
		{name: "both without services", via: ViaBoth, pods: pods, wantErr: "no Services to probe"},
		{name: "pod-ip with one pod", via: ViaPodIP, pods: pods[:1], services: web, wantErr: "needs at least two"},
		{name: "service without pods", via: ViaService, services: web, wantErr: "needs a pod to connect from"},
		{name: "service twice", pods: pods, services: append(slices.Clone(web), web...), wantErr: "service x/web is declared twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := withDefaults(Config{Via: tc.via, Pods: tc.pods, Services: tc.services})
			if err == nil {
				err = validate(cfg)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Via != tc.want {
				t.Errorf("via %q, want %q", cfg.Via, tc.want)
			}
			if cfg.Attempts != DefaultAttempts {
				t.Errorf("attempts %d, want %d", cfg.Attempts, DefaultAttempts)
			}
		})
	}
}
