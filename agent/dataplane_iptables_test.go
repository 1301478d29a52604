package agent

import (
	"testing"

	"lockstep.dev/lockstep/agent/iptables"
)

// TestIptablesTranslatesServicesOnlyStandalone: a standalone agent runs
// where no kube-proxy translates Services, so its iptables dataplane
// does; in Kubernetes mode kube-proxy does, and the dataplane must not
// translate a second time.
func TestIptablesTranslatesServicesOnlyStandalone(t *testing.T) {
	for _, tt := range []struct {
		name       string
		standalone bool
	}{{"standalone", true}, {"kubernetes", false}} {
		t.Run(tt.name, func(t *testing.T) {
			o := iptablesOptions(Config{Standalone: tt.standalone, NodeName: "n"}, iptables.ModeNFT, iptables.ExecRunner{})
			if o.TranslateServices != tt.standalone || o.Mode != iptables.ModeNFT {
				t.Fatalf("options %+v: TranslateServices %v, want %v", o, o.TranslateServices, tt.standalone)
			}
		})
	}
}
