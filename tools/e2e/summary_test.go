//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/kubee2e"
)

func sampleResult(dataplane string, failed bool) result {
	rep := &kubee2e.Report{Duration: 1500 * time.Second, Specs: []kubee2e.Spec{
		{Name: "[sig-network] Netpol A should pass [Feature:NetworkPolicy]", State: kubee2e.Passed, Duration: 21 * time.Second},
		{Name: "[sig-network] Netpol B should skip [Feature:SCTPConnectivity]", State: kubee2e.Skipped, Reason: "this kernel has no SCTP: protocol not supported"},
	}}
	if failed {
		rep.Specs = append(rep.Specs, kubee2e.Spec{Name: "[sig-network] Netpol C should | fail", State: kubee2e.Failed,
			Duration: 95 * time.Second, Reason: "Had 9 wrong results in reachability matrix",
			Output: "probe.go:101] Validation of netpol-x-1/a -> netpol-y-2/b FAILED !!!\n" +
				"probe.go:104] Expected allowed pod connection was instead BLOCKED --- run 'kubectl exec a -n netpol-x-1 -- /agnhost connect 10.96.0.9:80'\n"})
	}
	return result{
		dataplane: dataplane, report: rep, wall: 1530 * time.Second, kube: "v1.33.4",
		machine: benchkit.Machine{Command: "go run ./tools/e2e netpol", Date: "2026-01-01 00:00 UTC"},
		focus:   kubee2e.NetpolFocus,
		skips:   kubee2e.NetpolSkips(errors.New("protocol not supported")),
	}
}

func TestRenderNamesEveryFailureAndSkip(t *testing.T) {
	got := sampleResult("ebpf", true).render()
	for _, want := range []string{
		"<!-- e2e-netpol-ebpf:begin -->", "<!-- e2e-netpol-ebpf:end -->", "## eBPF dataplane",
		"**3 specs: 1 passed, 1 failed, 1 skipped** in 25m0s",
		`| [sig-network] Netpol C should \| fail | 1m35s | Had 9 wrong results in reachability matrix | x/a -> y/b: want allowed, got blocked |`,
		"| [sig-network] Netpol B should skip [Feature:SCTPConnectivity] | this kernel has no SCTP: protocol not supported |",
		"| [sig-network] Netpol A should pass [Feature:NetworkPolicy] | 21s |",
		"`go run ./tools/e2e netpol`", "Kubernetes v1.33.4",
		"| left out | `--ginkgo.skip=\\[Feature:SCTPConnectivity\\]`: this kernel has no SCTP: protocol not supported |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	if clean := sampleResult("iptables", false).render(); strings.Contains(clean, "### Failed") {
		t.Errorf("a run without failures has a Failed table:\n%s", clean)
	}
}

// TestSummaryKeepsTheOtherDataplane checks that a run on one dataplane
// rewrites its own section only.
func TestSummaryKeepsTheOtherDataplane(t *testing.T) {
	path := filepath.Join(t.TempDir(), "E2E.md")
	write := func(r result) {
		t.Helper()
		if err := sectionOf(r.dataplane).Write(path, r.render(), os.Stdout); err != nil {
			t.Fatal(err)
		}
	}
	write(sampleResult("iptables", false))
	write(sampleResult("ebpf", true))
	write(sampleResult("iptables", true))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "# lockstep and the upstream Kubernetes NetworkPolicy e2e specs") {
		t.Errorf("summary lost its introduction:\n%s", s)
	}
	for _, dp := range []string{"ebpf", "iptables"} {
		if n := strings.Count(s, "<!-- e2e-netpol-"+dp+":begin -->"); n != 1 {
			t.Errorf("%d %s sections, want 1:\n%s", n, dp, s)
		}
	}
	if strings.Count(s, "1 failed") != 2 {
		t.Errorf("the second iptables run did not replace the first:\n%s", s)
	}
}
