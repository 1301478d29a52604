package agent

import (
	"testing"

	"lockstep.dev/lockstep/agent/iptables"
)

// TestIptablesTranslatesServicesOnlyStandalone: a standalone agent runs
// where no kube-proxy translates Services, so its iptables dataplane
// does, unless --service-translation=false; in Kubernetes mode kube-proxy
// does, and the dataplane must not translate a second time.
func TestIptablesTranslatesServicesOnlyStandalone(t *testing.T) {
	for _, tt := range []struct {
		name       string
		standalone bool
		leave      bool
		want       bool
	}{
		{"standalone", true, false, true},
		{"standalone, translation off", true, true, false},
		{"kubernetes", false, false, false},
		{"kubernetes, translation off", false, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := iptablesOptions(Config{Standalone: tt.standalone, NodeName: "n", LeaveServicesToKubeProxy: tt.leave}, iptables.ModeNFT, iptables.ExecRunner{})
			if o.TranslateServices != tt.want || o.Mode != iptables.ModeNFT {
				t.Fatalf("options %+v: TranslateServices %v, want %v", o, o.TranslateServices, tt.want)
			}
		})
	}
}
