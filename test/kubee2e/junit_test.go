package kubee2e_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/kubee2e"
)

// report is a JUnit report as the e2e framework writes it (--report-dir):
// every spec of the suite, the set-up nodes, the message attribute empty
// and the failure in the text.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="8" disabled="4" errors="0" failures="2" time="97.5">
  <testsuite name="Kubernetes e2e suite" tests="8" time="97.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.02"></testcase>
    <testcase name="[It] [sig-storage] Volumes should mount [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Netpol NetworkPolicy between server and client should support a &#39;default-deny-ingress&#39; policy [Feature:NetworkPolicy]" classname="Kubernetes e2e suite" status="passed" time="21.668787558"></testcase>
    <testcase name="[It] [sig-network] Netpol NetworkPolicy between server and client should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]" classname="Kubernetes e2e suite" status="failed" time="60.1">
      <failure message="" type="failed">[FAILED] Had 3 wrong results in reachability matrix
In [It] at: k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/test_helper.go:138 @ 11/26/26 07:40:01.1
</failure>
      <system-err>STEP: Creating a network policy
comparison:
-	x/a	x/b
x/a	X	.
</system-err>
    </testcase>
    <testcase name="[It] [sig-network] Netpol NetworkPolicy between server and client should enforce updated policy [Feature:NetworkPolicy]" classname="Kubernetes e2e suite" status="timedout" time="900">
      <failure message="" type="timedout">[TIMEDOUT] A node timeout occurred
In [It] at: k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/network_policy.go:588 @ 11/26/26 07:55:01.1
</failure>
    </testcase>
    <testcase name="[It] [sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should support a &#39;default-deny-ingress&#39; policy [Feature:NetworkPolicy]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Netpol API should support creating NetworkPolicy API operations" classname="Kubernetes e2e suite" status="skipped" time="0.5">
      <skipped message="skipped - Only supported for providers [gce] (not skeleton)"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e JUnit report" classname="Kubernetes e2e suite" status="passed" time="0.06"></testcase>
  </testsuite>
</testsuites>
`

func TestParseJUnit(t *testing.T) {
	const (
		prefix = "[sig-network] Netpol "
		deny   = prefix + "NetworkPolicy between server and client should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]"
		egress = prefix + "NetworkPolicy between server and client should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]"
		update = prefix + "NetworkPolicy between server and client should enforce updated policy [Feature:NetworkPolicy]"
		sctp   = prefix + "[Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]"
		api    = prefix + "API should support creating NetworkPolicy API operations"
	)
	noSCTP := kubee2e.NetpolSkips(errors.New("protocol not supported"))
	type want struct {
		name   string
		state  kubee2e.State
		reason string
	}
	tests := []struct {
		name  string
		focus []string
		skips []kubee2e.Skip
		want  []want
	}{
		{
			name:  "the NetworkPolicy specs, SCTP skipped for want of a kernel",
			focus: kubee2e.NetpolFocus,
			skips: noSCTP,
			want: []want{
				{deny, kubee2e.Passed, ""},
				{egress, kubee2e.Failed, "Had 3 wrong results in reachability matrix"},
				{update, kubee2e.Failed, "timedout: A node timeout occurred"},
				{sctp, kubee2e.Skipped, "this kernel has no SCTP: protocol not supported"},
				{api, kubee2e.Skipped, "Only supported for providers [gce] (not skeleton)"},
			},
		},
		{
			name:  "a narrower focus leaves the rest out",
			focus: []string{`should enforce updated policy`},
			want:  []want{{update, kubee2e.Failed, "timedout: A node timeout occurred"}},
		},
		{
			name:  "a skipped spec with no skip of ours to explain it says so",
			focus: []string{`SCTPConnectivity`},
			want:  []want{{sctp, kubee2e.Skipped, "skipped, no reason given"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := kubee2e.ParseJUnit(strings.NewReader(report), tt.focus, tt.skips)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Duration != 97500*time.Millisecond {
				t.Errorf("duration %s, want 97.5s", rep.Duration)
			}
			if len(rep.Specs) != len(tt.want) {
				t.Fatalf("got %d specs, want %d: %+v", len(rep.Specs), len(tt.want), rep.Specs)
			}
			for i, w := range tt.want {
				got := rep.Specs[i]
				if got.Name != w.name || got.State != w.state || got.Reason != w.reason {
					t.Errorf("spec %d:\n got  %q %s %q\n want %q %s %q", i, got.Name, got.State, got.Reason, w.name, w.state, w.reason)
				}
			}
		})
	}
}

func TestParseJUnitKeepsFailureDetails(t *testing.T) {
	rep, err := kubee2e.ParseJUnit(strings.NewReader(report), []string{`enforce egress policy`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Specs) != 1 {
		t.Fatalf("got %d specs, want 1", len(rep.Specs))
	}
	s := rep.Specs[0]
	if !strings.Contains(s.Failure, "test_helper.go:138") {
		t.Errorf("failure lost its location: %q", s.Failure)
	}
	if !strings.Contains(s.Output, "comparison:") {
		t.Errorf("output lost the spec's timeline: %q", s.Output)
	}
	if s.Duration != 60100*time.Millisecond {
		t.Errorf("duration %s, want 1m0.1s", s.Duration)
	}
	if n := rep.Count(kubee2e.Failed); n != 1 {
		t.Errorf("Count(Failed) = %d, want 1", n)
	}
}

func TestParseJUnitReportsFailedSetUp(t *testing.T) {
	const broken = `<testsuites><testsuite time="301">
<testcase name="[SynchronizedBeforeSuite]" status="failed" time="300">
<failure message="" type="failed">[FAILED] Error waiting for all pods to be running and ready: 1 / 3 pods in namespace kube-system are NOT in RUNNING and READY state in 5m0s
In [SynchronizedBeforeSuite] at: k8s.io/kubernetes@v1.33.4/test/e2e/e2e.go:69</failure>
</testcase>
<testcase name="[It] [sig-network] Netpol NetworkPolicy between server and client should support allow-all policy [Feature:NetworkPolicy]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`
	rep, err := kubee2e.ParseJUnit(strings.NewReader(broken), kubee2e.NetpolFocus, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed := rep.In(kubee2e.Failed)
	if len(failed) != 1 || failed[0].Name != "[SynchronizedBeforeSuite]" ||
		!strings.HasPrefix(failed[0].Reason, "Error waiting for all pods to be running and ready") {
		t.Errorf("failed set-up not reported: %+v", failed)
	}
}

func TestParseJUnitRefusesGarbage(t *testing.T) {
	for _, in := range []string{"", "not xml", "<testsuites></testsuites>"} {
		if _, err := kubee2e.ParseJUnit(strings.NewReader(in), nil, nil); err == nil {
			t.Errorf("ParseJUnit(%q) gave no error", in)
		}
	}
}

func TestArgsSelectAndSkip(t *testing.T) {
	args := kubee2e.Args(kubee2e.Options{
		Kubeconfig: "/k", Dir: "/r", Focus: kubee2e.NetpolFocus,
		Skips: kubee2e.NetpolSkips(errors.New("no")), Timeout: time.Hour,
	})
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"--kubeconfig=/k", "--report-dir=/r", "--provider=skeleton", "--ginkgo.timeout=1h0m0s",
		`--ginkgo.focus=\[Feature:NetworkPolicy\]`, `--ginkgo.skip=\[Feature:SCTPConnectivity\]`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args %q lack %q", joined, want)
		}
	}
	if skips := kubee2e.NetpolSkips(nil); len(skips) != 0 {
		t.Errorf("a kernel with SCTP skips %+v", skips)
	}
}

func TestWrongProbes(t *testing.T) {
	const output = `  I1126 07:24:51.997383 9446 kubemanager.go:217]  probe #12 :: connectivity not expected :: netpol-x-2962/a -> 10.96.123.164
  I1126 07:24:51.997416 9446 probe.go:101] Validation of netpol-x-2962/a -> netpol-x-2962/b FAILED !!!
  I1126 07:24:51.997427 9446 probe.go:102] error <nil> 
  I1126 07:24:51.997435 9446 probe.go:106] Expected blocked pod connection was instead ALLOWED --- run 'kubectl exec a -c cont-80-tcp -n netpol-x-2962 -- /agnhost connect 10.96.123.164:80 --timeout=1s --protocol=tcp'
  I1126 07:24:51.999001 9446 probe.go:101] Validation of netpol-y-2708/c -> netpol-y-2708/c FAILED !!!
  I1126 07:24:51.999002 9446 probe.go:104] Expected allowed pod connection was instead BLOCKED --- run 'kubectl exec c -c cont-80-tcp -n netpol-y-2708 -- /agnhost connect 10.96.1.3:80 --timeout=1s --protocol=tcp'
  I1126 07:24:52.000001 9446 probe.go:101] Validation of netpol-y-2708/c -> netpol-z-3616/a FAILED !!!
  I1126 07:24:52.000002 9446 probe.go:104] Expected allowed pod connection was instead BLOCKED --- run 'kubectl exec c -c cont-80-tcp -n netpol-y-2708 -- /agnhost connect 10.96.1.2:80 --timeout=1s --protocol=tcp'
  I1126 07:24:51.997527 9446 reachability.go:178] reachability: correct:70, incorrect:2, result=false
`
	got := kubee2e.WrongProbes(output + output) // a probe logged twice is one; y/c's of itself is none
	want := []kubee2e.Probe{
		{From: "x/a", To: "x/b", Want: "blocked", Got: "allowed",
			Command: "kubectl exec a -c cont-80-tcp -n netpol-x-2962 -- /agnhost connect 10.96.123.164:80 --timeout=1s --protocol=tcp"},
		{From: "y/c", To: "z/a", Want: "allowed", Got: "blocked",
			Command: "kubectl exec c -c cont-80-tcp -n netpol-y-2708 -- /agnhost connect 10.96.1.2:80 --timeout=1s --protocol=tcp"},
	}
	if len(got) != len(want) {
		t.Fatalf("WrongProbes: %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("probe %d: %+v\nwant %+v", i, got[i], want[i])
		}
	}
	if s := got[0].String(); s != "x/a -> x/b: want blocked, got allowed" {
		t.Errorf("String() = %q", s)
	}
	if got := kubee2e.WrongProbes("STEP: nothing wrong here\n"); len(got) != 0 {
		t.Errorf("WrongProbes of a clean output: %q", got)
	}
}
