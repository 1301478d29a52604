//go:build linux

package main

import (
	"fmt"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/kubee2e"
)

// dataplaneTitles are the dataplanes netpol runs the specs on, as the
// summary titles them.
var dataplaneTitles = map[string]string{
	"ebpf":     "eBPF dataplane",
	"iptables": "iptables dataplane",
}

// summaryIntro starts a summary file netpol creates.
const summaryIntro = `# lockstep and the upstream Kubernetes NetworkPolicy e2e specs

Written by ` + "`make e2e`" + ` (` + "`go run ./tools/e2e netpol`" + `): the NetworkPolicy specs of
the upstream end-to-end suite (e2e.test of the Kubernetes release
tools/kube-testenv pins), run on the real two-node cluster of
test/realnode with lockstep installed from deploy/, once per dataplane.
Each section is rewritten by the run that measured it; text outside the
sections is kept.
`

// sectionOf is the part of the summary file one dataplane's run owns.
func sectionOf(dataplane string) benchkit.Section {
	s := benchkit.Section{Tool: "e2e-netpol-" + dataplane, Intro: summaryIntro}
	if dataplane == "iptables" {
		s.After = "e2e-netpol-ebpf"
	}
	return s
}

// result is one dataplane's run, as the summary shows it.
type result struct {
	dataplane string
	report    *kubee2e.Report
	wall      time.Duration // switching the dataplane and the run
	machine   benchkit.Machine
	kube      string // the API server's version
	focus     []string
	skips     []kubee2e.Skip
	runErr    error // the suite's own failure, outside the specs
}

// render returns r's section of the summary file, markers included.
func (r result) render() string {
	var b strings.Builder
	sec := sectionOf(r.dataplane)
	rep := r.report
	fmt.Fprintf(&b, "%s\n## %s\n\n", sec.Begin(), dataplaneTitles[r.dataplane])
	specs := "specs"
	if len(rep.Specs) == 1 {
		specs = "spec"
	}
	fmt.Fprintf(&b, "**%d %s: %d passed, %d failed, %d skipped** in %s (the suite's own time; %s with the switch to this dataplane).\n\n",
		len(rep.Specs), specs, rep.Count(kubee2e.Passed), rep.Count(kubee2e.Failed), rep.Count(kubee2e.Skipped),
		fmtDuration(rep.Duration), fmtDuration(r.wall))
	if r.runErr != nil {
		fmt.Fprintf(&b, "The suite itself failed: %s\n\n", mdCell(r.runErr.Error()))
	}
	var focus []string
	for _, f := range r.focus {
		focus = append(focus, "`--ginkgo.focus="+f+"`")
	}
	skips := "none (this kernel has SCTP: the SCTP specs ran)"
	if len(r.skips) > 0 {
		var parts []string
		for _, sk := range r.skips {
			parts = append(parts, "`--ginkgo.skip="+sk.Pattern+"`: "+sk.Reason)
		}
		skips = strings.Join(parts, "; ")
	}
	rows := r.machine.Rows(
		[2]string{"selection", strings.Join(focus, " ")},
		[2]string{"left out", mdCell(skips)},
		[2]string{"cluster", "two nodes and a control plane in network namespaces (test/realnode): Kubernetes " + r.kube + " (the suite's release too), containerd 1.6, kube-proxy in iptables mode, CoreDNS"},
	)
	b.WriteString(benchkit.Table(rows))
	if failed := rep.In(kubee2e.Failed); len(failed) > 0 {
		b.WriteString("\n### Failed\n\n| spec | time | first line of the failure | probes that answered wrong |\n|---|---|---|---|\n")
		for _, s := range failed {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(s.Name), fmtDuration(s.Duration), mdCell(s.Reason), mdCell(probeList(s.Output)))
		}
	}
	if skipped := rep.In(kubee2e.Skipped); len(skipped) > 0 {
		b.WriteString("\n### Skipped\n\n| spec | why |\n|---|---|\n")
		for _, s := range skipped {
			fmt.Fprintf(&b, "| %s | %s |\n", mdCell(s.Name), mdCell(s.Reason))
		}
	}
	if passed := rep.In(kubee2e.Passed); len(passed) > 0 {
		b.WriteString("\n<details><summary>Passed</summary>\n\n| spec | time |\n|---|---|\n")
		for _, s := range passed {
			fmt.Fprintf(&b, "| %s | %s |\n", mdCell(s.Name), fmtDuration(s.Duration))
		}
		b.WriteString("\n</details>\n")
	}
	fmt.Fprintf(&b, "\n%s\n", sec.End())
	return b.String()
}

// maxProbes is how many wrong probes a failed spec's row lists.
const maxProbes = 6

// probeList lists the wrong probes of a failed spec's output, the first
// maxProbes of them.
func probeList(output string) string {
	probes := kubee2e.WrongProbes(output)
	var parts []string
	for i, p := range probes {
		if i == maxProbes {
			parts = append(parts, fmt.Sprintf("and %d more", len(probes)-maxProbes))
			break
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}

// mdCell makes s safe inside a markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// fmtDuration rounds d to what a reader compares: seconds, or tenths
// below ten seconds.
func fmtDuration(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
