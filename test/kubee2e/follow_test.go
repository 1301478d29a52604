//go:build linux

package kubee2e

import (
	"fmt"
	"strings"
	"testing"
)

// verbose is the shape of the suite's --ginkgo.v output: a rule before
// each node, the spec's text on the line after it, its end on a line
// starting with a bullet.
const verbose = `Will run 4 of 6730 specs
------------------------------
[SynchronizedBeforeSuite] 
[SynchronizedBeforeSuite] PASSED [0.019 seconds]
------------------------------
SSSSSSSSSS
------------------------------
[sig-network] Netpol NetworkPolicy between server and client should pass [Feature:NetworkPolicy] [sig-network, Feature:NetworkPolicy]
k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/network_policy.go:121
  STEP: Creating a kubernetes client @ 11/26/26 07:22:21.98
• [21.669 seconds]
------------------------------
[sig-network] Netpol NetworkPolicy between server and client should fail [Feature:NetworkPolicy] [sig-network, Feature:NetworkPolicy]
  STEP: Creating a network policy
  [FAILED] in [It] - k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/test_helper.go:129 @ 11/26/26 07:24:51.997
  STEP: Destroying namespace "netpol-x-2962" for this suite. @ 11/26/26 07:24:52
• [FAILED] [60.100 seconds]
[sig-network] Netpol NetworkPolicy between server and client [It] should fail [Feature:NetworkPolicy] [sig-network, Feature:NetworkPolicy]
k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/network_policy.go:1020

  [FAILED] Had 2 wrong results in reachability matrix
  In [It] at: k8s.io/kubernetes@v1.33.4/test/e2e/network/netpol/test_helper.go:129 @ 11/26/26 07:24:51.997
------------------------------
[sig-network] Netpol API should skip
S [SKIPPED] [0.500 seconds]
------------------------------
[sig-network] Netpol NetworkPolicy between server and client should time out [Feature:NetworkPolicy]
• [TIMEDOUT] [900.000 seconds]
`

func TestFollowReportsEachSpec(t *testing.T) {
	var got []string
	follow(strings.NewReader(verbose), func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
	want := []string{
		"e2e: Will run 4 of 6730 specs",
		"e2e: [1/4] passed in 21.7s: [sig-network] Netpol NetworkPolicy between server and client should pass [Feature:NetworkPolicy] [sig-network, Feature:NetworkPolicy]",
		"e2e: [2/4] failed in 1m0.1s: [sig-network] Netpol NetworkPolicy between server and client should fail [Feature:NetworkPolicy] [sig-network, Feature:NetworkPolicy]: Had 2 wrong results in reachability matrix",
		"e2e: [3/4] skipped in 500ms: [sig-network] Netpol API should skip",
		"e2e: [4/4] timedout in 15m0s: [sig-network] Netpol NetworkPolicy between server and client should time out [Feature:NetworkPolicy]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
