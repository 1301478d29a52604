//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

// fileSection is the part of the output file podstartbench owns.
var fileSection = benchkit.Section{Tool: "podstartbench", After: "kubebench"}

// targetRatio is the target: lockstep's time to all Ready within
// this factor of bridge + host-local's.
const targetRatio = 1.1

// report is one run, ready to be written.
type report struct {
	machine benchkit.Machine
	pods    int
	rounds  []round
}

// times returns the rounds' times of one CNI, in round order.
func (r report) times(cni string, f func(round) time.Duration) []time.Duration {
	var out []time.Duration
	for _, x := range r.rounds {
		if x.cni == cni {
			out = append(out, f(x))
		}
	}
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func fmtRounds(d []time.Duration) string {
	var parts []string
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%.2f s", x.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// section renders the podstartbench section, markers included.
func (r report) section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	all := func(x round) time.Duration { return x.ready }
	first := func(x round) time.Duration { return x.first }
	ls, br := r.times(cniLockstep, all), r.times(cniBridge, all)
	ratio := median(ls).Seconds() / median(br).Seconds()
	w("%s", fileSection.Begin())
	w("## Pod start on a real node: %d pods at once", r.pods)
	w("")
	w("_Written by `tools/podstartbench` (`make bench`); do not edit by hand._")
	w("")
	w("The real-node cluster of test/realnode (kubelet, containerd 1.6 and runc,")
	w("kube-proxy in iptables mode, the control plane; lockstep installed from")
	w("deploy/ with the eBPF dataplane). Each round applies %d pods (the pause image,", r.pods)
	w("no probe) in one `kubectl apply`, all for node %s by a node selector, and", benchNode)
	w("times from the apply until a `kubectl get --watch` has seen every one Ready;")
	w("then deletes them (not timed). The reference rounds give the node to the")
	w("`bridge` + `host-local` plugins (Debian's containernetworking-plugins) with a")
	w("config list that sorts before lockstep's; everything else is the same. The")
	w("rounds alternate, each CNI first in every other one, after one unmeasured")
	w("round of each.")
	w("")
	w("### Machine")
	w("")
	b.WriteString(benchkit.Table(r.machine.Rows()))
	w("")
	w("### %d pods until all Ready", r.pods)
	w("")
	w("| CNI | median | rounds | first pod Ready (median) |")
	w("|---|---:|---|---:|")
	w("| lockstep | **%.2f s** | %s | %.2f s |", median(ls).Seconds(), fmtRounds(ls), median(r.times(cniLockstep, first)).Seconds())
	w("| bridge + host-local | **%.2f s** | %s | %.2f s |", median(br).Seconds(), fmtRounds(br), median(r.times(cniBridge, first)).Seconds())
	w("")
	w("### Target")
	w("")
	w("| target | measured | result |")
	w("|---|---|---|")
	verdict := "PASS"
	if ratio > targetRatio {
		verdict = "FAIL"
	}
	w("| lockstep ≤ %.1f× bridge + host-local, medians | %.2f× | %s |", targetRatio, ratio, verdict)
	w("%s", fileSection.End())
	return b.String()
}
