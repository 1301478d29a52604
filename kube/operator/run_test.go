package operator

import (
	"errors"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/kube/client"
)

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty for none
	}{
		{name: "zero values take the defaults", cfg: Config{REST: &client.Config{}}},
		{name: "no API server", cfg: Config{}, wantErr: "no API server"},
		{name: "negative min free", cfg: Config{REST: &client.Config{}, MinFree: -1}, wantErr: "negative"},
		{name: "negative delay", cfg: Config{REST: &client.Config{}, ExcessReleaseDelay: -time.Second}, wantErr: "negative"},
		{
			name:    "renew deadline not shorter than the lease: two leaders possible",
			cfg:     Config{REST: &client.Config{}, LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second},
			wantErr: "renew deadline",
		},
		{
			name:    "retry period not shorter than the renew deadline",
			cfg:     Config{REST: &client.Config{}, RetryPeriod: 20 * time.Second},
			wantErr: "retry period",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("withDefaults() error %v, want one mentioning %q", err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "renew") || strings.Contains(tt.wantErr, "retry") {
					if !errors.Is(err, errLeaseTiming) {
						t.Errorf("error %v does not wrap errLeaseTiming", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.LeaseDuration != DefaultLeaseDuration || got.RenewDeadline != DefaultRenewDeadline ||
				got.RetryPeriod != DefaultRetryPeriod || got.Resync != DefaultResync ||
				got.LeaseNamespace != DefaultLeaseNamespace || got.LeaseName != DefaultLeaseName ||
				got.Identity == "" || got.Logger == nil {
				t.Errorf("defaults not applied: %+v", got)
			}
		})
	}
	a, _ := Config{REST: &client.Config{}}.withDefaults()
	b, _ := Config{REST: &client.Config{}}.withDefaults()
	if a.Identity == b.Identity {
		t.Errorf("two replicas got the same identity %q: both would think they hold the lease", a.Identity)
	}
}
