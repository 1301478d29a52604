//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"
)

// fileSection is the part of the output file policybench owns; a new one
// follows tools/cnibench's.
var fileSection = benchkit.Section{Tool: "policybench", After: "cnibench"}

// The targets lockstep's policy dataplane is held to.
const (
	targetVerdictNS     = 50.0
	targetChangeP50     = time.Millisecond
	targetChangeP99     = 10 * time.Millisecond
	targetThroughputMin = 0.95 // policy-on rate at least this share of policy-off
	targetRSSKB         = 150 * 1024

	// The iptables dataplane's targets: scratchPolicies policies applied
	// from scratch, and one policy change with iptablesTargetRules loaded.
	targetIPTablesScratch = 2 * time.Second
	targetIPTablesChange  = 50 * time.Millisecond
	iptablesTargetRules   = 50000
)

// report is what one run measured, ready to render.
type report struct {
	cfg      config
	facts    facts
	change   *changeResult
	verdicts map[verdictKey]float64
	rss      *rssResult
	iperf    *throughputResult
	// dataplanes is the eBPF-versus-iptables comparison; nil when it did
	// not run. It is the only part set with -only dataplanes.
	dataplanes *dataplanesResult
}

// target is one line of the targets table.
type target = benchkit.Target

func (r *report) targets() []target {
	if r.change == nil {
		return r.dataplaneTargets()
	}
	worst := 0.0
	for _, n := range verdictRuleCounts {
		for _, kase := range verdictCases {
			worst = max(worst, r.netVerdict(verdictKey{n, kase}))
		}
	}
	p50, p99 := benchkit.Percentile(r.change.endToEnd, 50), benchkit.Percentile(r.change.endToEnd, 99)
	on, off := median(r.iperf.on), median(r.iperf.off)
	ratio := on / off
	return append([]target{{
		Name:     fmt.Sprintf("verdict above the test-run floor ≤ %.0f ns (every case)", targetVerdictNS),
		Measured: fmt.Sprintf("worst %.0f ns", worst),
		Pass:     worst <= targetVerdictNS,
	}, {
		Name:     "policy change → maps applied p50 ≤ " + benchkit.FmtDur(targetChangeP50),
		Measured: benchkit.FmtDur(p50),
		Pass:     p50 <= targetChangeP50,
	}, {
		Name:     "policy change → maps applied p99 ≤ " + benchkit.FmtDur(targetChangeP99),
		Measured: benchkit.FmtDur(p99),
		Pass:     p99 <= targetChangeP99,
	}, {
		Name:     fmt.Sprintf("throughput with policy ≥ %.2f × without", targetThroughputMin),
		Measured: fmt.Sprintf("%.2f×", ratio),
		Pass:     ratio >= targetThroughputMin,
	}, {
		Name:     fmt.Sprintf("agent RSS ≤ %d MiB", targetRSSKB/1024),
		Measured: fmt.Sprintf("%.0f MiB", float64(r.rss.rssKB)/1024),
		Pass:     r.rss.rssKB <= targetRSSKB,
	}}, r.dataplaneTargets()...)
}

// netVerdict is the time of verdict k above the floor of its harness.
func (r *report) netVerdict(k verdictKey) float64 {
	return r.verdicts[k] - r.verdicts[floorKey(k.kase)]
}

// section renders the policybench section, markers included.
func (r *report) section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	c := r.change

	w("%s", fileSection.Begin())
	if c == nil {
		w("## Policy dataplane: eBPF versus iptables")
		w("")
		w("_Written by `tools/policybench -only dataplanes`; do not edit by hand._")
		w("")
		r.writeMachine(w)
		r.writeDataplanes(w)
		r.writeTargets(w)
		w("%s", fileSection.End())
		return b.String()
	}
	w("## Policy dataplane: verdict cost, policy changes, throughput, memory")
	w("")
	w("_Written by `tools/policybench` (`make bench`); do not edit by hand._")
	w("")
	w("One synthetic cluster throughout: %d namespaces × %d apps × %d replicas = %d remote",
		benchcluster.Namespaces, benchcluster.Apps, benchcluster.Replicas, benchcluster.Namespaces*benchcluster.Apps*benchcluster.Replicas)
	w("pods with addresses, one label set per app (%d identities), and %d NetworkPolicies",
		c.identities, benchcluster.Namespaces*benchcluster.Apps)
	w("(pod selector; ingress from a pod selector and from a namespace selector with a")
	w("pod selector, on a named port and a port range; egress to DNS by named port, to a")
	w("tier, and for every fourth app to an ipBlock with an except).")
	w("")
	w("- **Verdict**: agent/datapath's `BenchmarkPrivilegedVerdict` (10k identities in the ipcache,")
	w("  100 / 1k / 10k rules on the endpoint), run as `go test -bench` with %d", r.cfg.verdictRuns)
	w("  runs per case: the kernel's own per-run time (BPF_PROG_TEST_RUN's duration, no")
	w("  syscall). deny, allow-new, ct-hit and ct-table are packets to the pod (to_pod);")
	w("  ct-reply is the pod's reply on the ct-hit connection (from_pod). deny, ct-hit and")
	w("  ct-reply are one test run of that many kernel repetitions, so a tracked packet")
	w("  after the first is decided from the CPU's flow cache. allow-new must be a new")
	w("  connection every run, and ct-table a tracked packet no CPU has cached (the")
	w("  caches are emptied before each run), so each is that many test runs of one,")
	w("  starting with caches the syscall left cold. The floor is `BenchmarkPrivilegedVerdictFloor`, a")
	w("  program that only returns, under the same two harnesses and packet; *net* is")
	w("  a verdict minus its harness's floor.")
	w("- **Policy change → maps applied**: the cluster in an agent store, %d local", benchcluster.LocalEndpoints)
	w("  endpoints on real veths in a throwaway netns with the programs attached. Each of")
	w("  %d edits changes the port range of a policy that selects a local endpoint; the", c.edits)
	w("  time runs from the store write transaction to `enforcer.Sync` returning. Sync")
	w("  reads what changed from the store's change log, compiles incrementally, and")
	w("  applies (its phases are timed inside Sync). *Full compile* is `policy.Compile`")
	w("  of a whole snapshot after each edit: what every Sync cost before incremental")
	w("  compilation. Then, end to end, %d writes of each: edits of policies that select", c.edits)
	w("  no local endpoint (*elsewhere*, most edits of a many-node cluster); a remote pod")
	w("  of an existing identity appearing then leaving (*pod churn*); a pod with a")
	w("  label set of its own (a new identity every policy's DNS egress rule picks)")
	w("  appearing then leaving (*identity churn*). Percentiles are nearest-rank.")
	w("  The full compile after each edit spaces the edits further apart than an RCU grace")
	w("  period, so no eBPF apply waits for one; the churn writes follow each other at once,")
	w("  and each of their applies waits for the rest of the grace period after the")
	w("  previous flip (see Dataplanes below).")
	w("- **Throughput**: a node with the agent, two pods ADDed through lockstep-cni, a")
	w("  policy isolating the server and allowing the client on TCP %d; `iperf3 -c -t %d`", iperfPort, r.cfg.iperfSeconds)
	if r.cfg.iperfPin {
		w("  from the client pod to the server pod (client and server pinned to CPUs %d and %d),", clientCPU, serverCPU)
	} else {
		w("  from the client pod to the server pod (not pinned to CPUs),")
	}
	w("  after a warm-up run. %d rounds, each of three runs back to back, in an order that", r.cfg.iperfRounds)
	w("  rotates from round to round: lockstep's programs attached (*on*), a program that")
	w("  only returns TC_ACT_OK on both hooks (*pass*), the clsact qdisc removed from both")
	w("  host veths (*off*). Median of each; on ÷ off of the medians and of each round.")
	w("  The kernel's BPF run-time statistics are on during the rounds, for every program")
	w("  on the machine, and count the programs' runs in real traffic (caches as the")
	w("  traffic leaves them, unlike the verdict benchmark's repeated test runs).")
	w("- **Agent memory**: `lockstep agent --standalone --manifests` with the cluster as")
	w("  manifests, VmRSS %s after it starts serving (it loads and applies the manifests", settle)
	w("  before it opens its socket).")
	w("")

	r.writeMachine(w)

	w("### Per-packet verdict (10k identities)")
	w("")
	w("Measured, and net of the test-run floor (%.0f ns with the kernel's repeat, %.0f ns",
		r.verdicts[floorKey("deny")], r.verdicts[floorKey("allow-new")])
	w("for single runs):")
	w("")
	head := []string{"rules"}
	for _, suffix := range []string{"", " net"} {
		for _, kase := range verdictCases {
			head = append(head, kase+suffix)
		}
	}
	w("| %s |", strings.Join(head, " | "))
	w("|%s", strings.Repeat("---:|", len(head)))
	for _, n := range verdictRuleCounts {
		cells := make([]string, 0, 2*len(verdictCases))
		for _, kase := range verdictCases {
			cells = append(cells, fmt.Sprintf("%.0f ns", r.verdicts[verdictKey{n, kase}]))
		}
		for _, kase := range verdictCases {
			cells = append(cells, fmt.Sprintf("%.0f ns", r.netVerdict(verdictKey{n, kase})))
		}
		w("| %d | %s |", n, strings.Join(cells, " | "))
	}
	w("")
	if ins, ok := r.verdicts[ctInsertKey]; ok {
		w("A new connection's conntrack insert alone, a program that only inserts a new key")
		w("into a map made like lockstep_ct (`BenchmarkPrivilegedVerdictFloor/ct-insert`, repeat")
		w("harness): %.0f ns, %.0f ns net. allow-new pays it once per connection.", ins, ins-r.verdicts[floorKey("deny")])
		w("")
	}

	w("### Policy change → maps applied (%d edits)", c.edits)
	w("")
	w("Compiled state: %d ipcache addresses, %d rules over %d endpoints. Applies skipped", c.addrs, c.rules, benchcluster.LocalEndpoints)
	w("(compiled state unchanged): %d of %d.", c.skipped, c.edits)
	w("")
	b.WriteString(c.table())
	w("")

	w("### TCP throughput between two pods (iperf3, %d s per run)", r.cfg.iperfSeconds)
	w("")
	w("| | median | runs |")
	w("|---|---:|---|")
	w("| on: lockstep's programs | %s | %s |", gbps(median(r.iperf.on)), gbpsList(r.iperf.on))
	w("| pass: a pass-through program | %s | %s |", gbps(median(r.iperf.pass)), gbpsList(r.iperf.pass))
	w("| off: no clsact qdisc | %s | %s |", gbps(median(r.iperf.off)), gbpsList(r.iperf.off))
	w("| **on ÷ off** | **%.2f** | per round %s (median %.2f) |", median(r.iperf.on)/median(r.iperf.off), fmtRatios(r.iperf.ratios()), median(r.iperf.ratios()))
	w("")
	w("Mean run time of each program in this traffic, from the kernel's BPF run-time")
	w("statistics during the timed runs (which add two clock reads to each run): %s.", r.iperf.runTimes())
	w("")

	w("### Agent memory (%d pods, %d policies)", benchcluster.Namespaces*benchcluster.Apps*benchcluster.Replicas, benchcluster.Namespaces*benchcluster.Apps)
	w("")
	w("| | |")
	w("|---|---:|")
	w("| VmRSS | %.0f MiB |", float64(r.rss.rssKB)/1024)
	w("| VmHWM (peak) | %.0f MiB |", float64(r.rss.hwmKB)/1024)
	w("")

	if r.dataplanes != nil {
		r.writeDataplanes(w)
	}
	r.writeTargets(w)
	w("%s", fileSection.End())
	return b.String()
}

// writeMachine renders the table of facts about the machine and the run.
func (r *report) writeMachine(w func(string, ...any)) {
	w("### Machine")
	w("")
	w("%s", benchkit.Table(r.facts.Rows([2]string{"iperf3", r.facts.iperf})))
}

// writeTargets renders the targets table.
func (r *report) writeTargets(w func(string, ...any)) {
	w("%s", strings.TrimSuffix(benchkit.TargetsTable(r.targets()), "\n"))
}

// dataplaneTargets are the iptables targets, measured by the dataplane
// comparison; none when it did not run.
func (r *report) dataplaneTargets() []target {
	d := r.dataplanes
	if d == nil {
		return nil
	}
	var out []target
	if s := d.scratchOf(dpIPTables); s != nil {
		out = append(out, target{
			Name:     fmt.Sprintf("iptables: %d policies applied from scratch < %s", scratchPolicies, benchkit.FmtDur(targetIPTablesScratch)),
			Measured: fmt.Sprintf("%s (%d rules, %d sets loaded)", benchkit.FmtDur(s.stats.firstSync), s.stats.ruleLines, s.stats.sets),
			Pass:     s.stats.firstSync < targetIPTablesScratch,
		})
	}
	for _, a := range d.atScale {
		if a.mode != d.mode {
			continue
		}
		out = append(out, target{
			Name: fmt.Sprintf("%s: one policy change < %s with %dk rules loaded", a.mode,
				benchkit.FmtDur(targetIPTablesChange), iptablesTargetRules/1000),
			Measured: fmt.Sprintf("%s (mean of %d) with %d rules loaded", benchkit.FmtDur(a.perOp), iptScaleRuns, a.rules),
			Pass:     a.perOp < targetIPTablesChange && a.rules >= iptablesTargetRules,
		})
	}
	return out
}

// writeDataplanes renders the eBPF-versus-iptables comparison.
func (r *report) writeDataplanes(w func(string, ...any)) {
	d := r.dataplanes
	w("### Dataplanes: eBPF versus iptables (%s), one run", d.mode)
	w("")
	w("Both dataplanes behind the same `enforcer.Enforcer`, each in a throwaway node netns")
	w("with %d local endpoints on real veths: eBPF with its maps on a private bpffs,", benchcluster.LocalEndpoints)
	w("iptables in mode %s with every iptables and ipset command run inside the netns.", d.mode)
	w("The cluster is the one above cut to N remote pods taken at an even stride (1,000")
	w("pods: one replica of every app; 100: one of every tenth app), with all %d policies.", benchcluster.Namespaces*benchcluster.Apps)
	w("Each of %d edits changes the port range of a policy that selects a local endpoint;", d.edits)
	w("time runs from the store write transaction to `enforcer.Sync` returning, as above.")
	w("Here the edits follow each other at once, so each eBPF apply first waits for the rest")
	w("of the RCU grace period that follows the previous flip (packets that read the previous")
	w("generation must be done before its copy is rewritten); the edits above are apart.")
	w("*First sync* is the Sync that applied the loaded store to the empty dataplane.")
	w("Rules *compiled* are lockstep's rules over the local endpoints (what eBPF loads);")
	w("iptables rules and sets are `Dataplane.Stats()` (both families, jumps from the")
	w("built-in chains not counted).")
	w("")
	w("| dataplane | pods | p50 | p90 | p99 | max | skipped | first sync | rules compiled | iptables rules | ipsets (members) |")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range d.changes {
		c := &d.changes[i]
		w("| %s | %d | %s | %s | %s | %s | %d/%d | %s | %d | %s | %s |", c.kind, c.pods,
			benchkit.FmtDur(benchkit.Percentile(c.changes, 50)), benchkit.FmtDur(benchkit.Percentile(c.changes, 90)),
			benchkit.FmtDur(benchkit.Percentile(c.changes, 99)), benchkit.FmtDur(benchkit.Percentile(c.changes, 100)),
			c.skipped, len(c.changes), benchkit.FmtDur(c.stats.firstSync), c.stats.rules, iptCell(c, c.stats.ruleLines), setsCell(c))
	}
	w("")
	w("#### %d policies from scratch", scratchPolicies)
	w("")
	w("One Sync into an empty dataplane with the first %d policies (%d namespaces × %d apps)", scratchPolicies, scratchPolicies/benchcluster.Apps, benchcluster.Apps)
	w("and %d remote pods committed. For reference, Azure NPM published 4 minutes for 640", benchcluster.Namespaces*benchcluster.Apps*benchcluster.Replicas)
	w("policies on legacy iptables (a different policy shape and node; not measured here).")
	w("")
	w("| dataplane | Sync | rules compiled | ipcache addresses | iptables rules | iptables chains | ipsets (members) |")
	w("|---|---:|---:|---:|---:|---:|---:|")
	for i := range d.scratch {
		c := &d.scratch[i]
		w("| %s | %s | %d | %d | %s | %s | %s |", c.kind, benchkit.FmtDur(c.stats.firstSync), c.stats.rules, c.stats.addrs,
			iptCell(c, c.stats.ruleLines), iptCell(c, c.stats.chains), setsCell(c))
	}
	w("")
	if len(d.atScale) == 0 {
		return
	}
	w("#### One change with ~50k iptables rules loaded")
	w("")
	w("The cluster above needs few rules once peers share union sets, so the 50k-rule")
	w("target is measured on agent/iptables's `BenchmarkPrivilegedApplyOneChange` (change=rule):")
	w("640 endpoints, each admitting 24 identities on ports of their own, dual stack,")
	w("loaded in a throwaway netns; one endpoint's port range changes back and forth,")
	w("each state compiled afresh. Mean of %d changes, run as `go test -bench`.", iptScaleRuns)
	w("")
	w("| mode | one change | rules loaded | ipsets (members) |")
	w("|---|---:|---:|---:|")
	for _, a := range d.atScale {
		w("| %s | %s | %d | %d (%d) |", a.mode, benchkit.FmtDur(a.perOp), a.rules, a.sets, a.members)
	}
	w("")
}

// iptCell is n for an iptables cell, a dash for eBPF.
func iptCell(c *dpChange, n int) string {
	if c.kind != dpIPTables {
		return "–"
	}
	return fmt.Sprint(n)
}

// setsCell is "sets (members)" for an iptables cell, a dash for eBPF.
func setsCell(c *dpChange) string {
	if c.kind != dpIPTables {
		return "–"
	}
	return fmt.Sprintf("%d (%d)", c.stats.sets, c.stats.setEntries)
}

func gbps(bps float64) string { return fmt.Sprintf("%.2f Gbit/s", bps/1e9) }

func gbpsList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x/1e9)
	}
	return strings.Join(s, ", ")
}

// write splices the section into path (atomically), or prints it when
// path is empty.
func (r *report) write(path string, stdout io.Writer) error {
	return fileSection.Write(path, r.section(), stdout)
}

// table renders the change latencies as a markdown table: end to end, the
// phases of an edit, and the other kinds of change.
func (c *changeResult) table() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("| | p50 | p90 | p99 | max |")
	w("|---|---:|---:|---:|---:|")
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{
		{"**end to end** (write → Sync returned)", c.endToEnd},
		{"store write transaction", c.write},
		{"Sync: read the change log", c.feed},
		{"Sync: incremental compile", c.compile},
		{"Sync: apply", c.apply},
		{"full compile of a snapshot (before)", c.full},
		{fmt.Sprintf("**edit elsewhere**, end to end (%d/%d applies skipped)", c.elsewhereSkipped, len(c.elsewhere)), c.elsewhere},
		{"**pod churn**, end to end", c.podChurn},
		{"**identity churn**, end to end", c.identChurn},
	} {
		w("| %s | %s | %s | %s | %s |", m.name, benchkit.FmtDur(benchkit.Percentile(m.d, 50)), benchkit.FmtDur(benchkit.Percentile(m.d, 90)),
			benchkit.FmtDur(benchkit.Percentile(m.d, 99)), benchkit.FmtDur(benchkit.Percentile(m.d, 100)))
	}
	return b.String()
}
