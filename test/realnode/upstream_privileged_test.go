//go:build linux

package realnode_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/kubee2e"
	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
)

// upstreamSubset are the upstream NetworkPolicy specs (test/e2e/network/netpol,
// "NetworkPolicy between server and client ... [Feature:NetworkPolicy]")
// every `make test` runs, one or two of each kind of rule; `make e2e` runs
// all of them. Each spec builds three namespaces of three pods and probes
// all 81 pairs through the pods' Services, so each takes 20 to 30 seconds.
// The egress ones need the eBPF dataplane to translate Services before it
// judges a pod's egress: the probes reach pods through their ClusterIPs.
var upstreamSubset = []struct {
	kind, spec string
}{
	{"ingress", "should support a 'default-deny-ingress' policy"},
	{"egress", "should deny egress from pods based on PodSelector"},
	{"egress to a selected pod", "should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector"},
	{"named port", "should allow ingress access on one named port"},
	{"ipBlock with except", "should enforce except clause while egress access to server in CIDR block"},
	{"namespace selector", "should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector"},
	{"policy update", "should enforce updated policy"},
}

// TestPrivilegedRealNodeUpstreamNetpol runs upstreamSubset with the
// upstream suite (e2e.test) on the shared cluster, on each dataplane: the
// eBPF one the cluster runs, then iptables (switched as an operator does,
// and back after). Any spec that fails fails the test, with the first line
// of its failure and the probes that answered wrong.
func TestPrivilegedRealNodeUpstreamNetpol(t *testing.T) {
	c := cluster(t)
	kubeBin, err := kubetest.BinDir(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(kubeBin, "e2e.test")
	t.Run("ebpf", func(t *testing.T) {
		if dp, err := c.Dataplane(t.Context()); err != nil || dp != "ebpf" {
			t.Fatalf("the shared cluster runs %q (%v), want ebpf", dp, err)
		}
		runUpstream(t, c, suite, "ebpf")
	})
	t.Run("iptables", func(t *testing.T) {
		if err := c.SetDataplane(t.Context(), "iptables"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := c.SetDataplane(ctx, "ebpf"); err != nil {
				t.Errorf("switch back to eBPF: %v", err)
			}
		})
		if err := c.WaitAgentsDataplane(t.Context(), "iptables", 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		runUpstream(t, c, suite, "iptables")
	})
}

// runUpstream runs the specs of upstreamSubset on dataplane and fails t
// for each one that did not pass.
func runUpstream(t *testing.T, c *realnode.Cluster, suite, dataplane string) {
	var focus, want []string
	for _, s := range upstreamSubset {
		text := "NetworkPolicy between server and client " + s.spec + " [Feature:NetworkPolicy]"
		focus = append(focus, regexp.QuoteMeta(text))
		want = append(want, "[sig-network] Netpol "+text)
	}
	t0 := time.Now()
	rep, err := kubee2e.Run(t.Context(), kubee2e.Options{
		Binary: suite, Kubeconfig: c.Kubeconfig, Kubectl: c.KubectlPath, Dir: t.TempDir(),
		Focus: focus, Timeout: 15 * time.Minute, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]kubee2e.Spec{}
	for _, s := range rep.Specs {
		ran[s.Name] = s
	}
	for _, name := range want {
		s, ok := ran[name]
		switch {
		case !ok:
			t.Errorf("%s: not in the suite's report (renamed upstream?)", name)
		case s.State != kubee2e.Passed:
			var probes []string
			for _, p := range kubee2e.WrongProbes(s.Output) {
				probes = append(probes, "  "+p.String()+": "+p.Command)
			}
			t.Errorf("%s: %s: %s\n%s", name, s.State, s.Reason, strings.Join(probes, "\n"))
		}
	}
	if len(rep.Specs) != len(want) {
		t.Errorf("the focus selected %d specs, want %d", len(rep.Specs), len(want))
	}
	t.Logf("%s: %d of %d upstream specs passed in %s", dataplane, rep.Count(kubee2e.Passed), len(want), time.Since(t0).Round(time.Second))
}
