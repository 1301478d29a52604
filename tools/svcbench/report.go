//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"
)

// fileSection is the part of the output file svcbench owns; a new one
// follows tools/podstartbench's.
var fileSection = benchkit.Section{Tool: "svcbench", After: "podstartbench"}

// The targets.
const (
	targetConnRatio = 1.3              // lockstep's connection rate ÷ kube-proxy's, medians
	targetAddedNS   = 30.0             // what translation adds to a packet of an established connection
	targetChangeP50 = time.Millisecond // Service change → applied, p50
)

// report is what one run measured, ready to render; a part that did not
// run is nil.
type report struct {
	cfg     config
	machine benchkit.Machine
	change  *changeResult
	verdict *verdictResult
	conn    *connResult
}

// rates returns the samples' rates of mode and backends, in round order.
func (c *connResult) rates(mode string, backends int) []float64 {
	return c.values(mode, backends, func(s connSample) float64 { return s.rate })
}

// values returns f of the samples of mode and backends, in round order.
func (c *connResult) values(mode string, backends int, f func(connSample) float64) []float64 {
	var out []float64
	for _, s := range c.samples {
		if s.mode == mode && s.backends == backends {
			out = append(out, f(s))
		}
	}
	return out
}

// peers are the modes lockstep's rate is compared with, each a target.
var peers = []string{modeKernel, modeKubeProxy}

// roundRatios are lockstep's rate ÷ peer's of each round.
func (c *connResult) roundRatios(backends int, peer string) []float64 {
	ls, kp := c.rates(modeLockstep, backends), c.rates(peer, backends)
	var out []float64
	for i := range min(len(ls), len(kp)) {
		out = append(out, ls[i]/kp[i])
	}
	return out
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// ratio is the median of lockstep's rates ÷ the median of peer's.
func (c *connResult) ratio(backends int, peer string) float64 {
	return medianOf(c.rates(modeLockstep, backends)) / medianOf(c.rates(peer, backends))
}

func (r *report) targets() []benchkit.Target {
	var out []benchkit.Target
	if c := r.conn; c != nil {
		for _, peer := range peers {
			for _, n := range backendCounts {
				ratio := c.ratio(n, peer)
				out = append(out, benchkit.Target{
					Name:     fmt.Sprintf("connections/s to a ClusterIP of %s: lockstep ≥ %.1f× %s (medians)", plural(n, "backend"), targetConnRatio, peer),
					Measured: fmt.Sprintf("%.2f× (%.0f against %.0f/s)", ratio, medianOf(c.rates(modeLockstep, n)), medianOf(c.rates(peer, n))),
					Pass:     ratio >= targetConnRatio,
				})
			}
		}
	}
	if v := r.verdict; v != nil {
		for _, g := range []struct{ group, what string }{{"established", "a packet of an established connection (from_pod)"}, {"reply", "its reply (to_pod)"}} {
			added := v.median(verdictKey{g.group, "translated-added-p50-ns"})
			out = append(out, benchkit.Target{
				Name:     fmt.Sprintf("translation adds ≤ %.0f ns to %s", targetAddedNS, g.what),
				Measured: fmt.Sprintf("%.0f ns", added),
				Pass:     added <= targetAddedNS,
			})
		}
	}
	if c := r.change; c != nil {
		p50 := benchkit.Percentile(c.spaced, 50)
		out = append(out, benchkit.Target{
			Name:     "Service change → applied p50 ≤ " + benchkit.FmtDur(targetChangeP50),
			Measured: fmt.Sprintf("%s (p99 %s)", benchkit.FmtDur(p50), benchkit.FmtDur(benchkit.Percentile(c.spaced, 99))),
			Pass:     p50 <= targetChangeP50,
		})
	}
	return out
}

// busy reports whether m's 1-minute load average at the start, or the
// median of those the measurements started with (loads), exceeded its CPU
// count.
func busy(m benchkit.Machine, loads []string) bool {
	var cpus int
	if _, err := fmt.Sscan(m.CPUs, &cpus); err != nil {
		return false
	}
	var at []float64
	for _, l := range loads {
		var v float64
		if _, err := fmt.Sscan(l, &v); err == nil {
			at = append(at, v)
		}
	}
	var start float64
	if _, err := fmt.Sscan(m.Load, &start); err == nil && start > float64(cpus) {
		return true
	}
	if len(at) == 0 {
		return false
	}
	slices.Sort(at)
	return at[len(at)/2] > float64(cpus)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// section renders the svcbench section, markers included.
func (r *report) section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("%s", fileSection.Begin())
	w("## Services: connection rate against kube-proxy, per-packet cost, changes")
	w("")
	w("_Written by `tools/svcbench` (`make bench`); do not edit by hand._")
	w("")
	w("### Machine")
	w("")
	b.WriteString(benchkit.Table(r.machine.Rows()))
	w("")
	var loads []string
	if r.conn != nil {
		for _, s := range r.conn.samples {
			loads = append(loads, s.load)
		}
	}
	if busy(r.machine, loads) {
		w("**The machine was busy**: its load average at the start, or the median of those its")
		w("connection-rate measurements started with (the cluster's own work included), exceeded")
		w("its CPU count, so other work shared the CPUs with the measurements, and the connection")
		w("rates vary with it from one measurement to the next. Rerun on a quieter machine before")
		w("drawing conclusions from them.")
		w("")
	}
	if r.conn != nil {
		r.writeConnRate(w)
	}
	if r.verdict != nil {
		r.writeVerdict(w)
	}
	if r.change != nil {
		r.writeChange(w)
	}
	b.WriteString(benchkit.TargetsTable(r.targets()))
	w("%s", fileSection.End())
	return b.String()
}

// partText is what -only prints: the part's tables and its targets.
func (r *report) partText(part string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	switch part {
	case partConnRate:
		r.writeConnRate(w)
	case partVerdict:
		r.writeVerdict(w)
	case partChange:
		r.writeChange(w)
	}
	b.WriteString(benchkit.TargetsTable(r.targets()))
	return b.String()
}

func (r *report) writeConnRate(w func(string, ...any)) {
	c := r.conn
	w("### Connection rate: pod → ClusterIP, lockstep against kube-proxy")
	w("")
	w("The real-node cluster of test/realnode (two nodes, kubelet, containerd, kube-proxy")
	w("in iptables mode; lockstep installed from deploy/ with the eBPF dataplane). %d backend", backendCounts[1])
	w("pods on %s accept connections and close them (`tools/svcbench/connrate serve`);", backendNode)
	w("two ClusterIP Services select the first of them and all %d. A client pod on %s", backendCounts[1], clientNode)
	w("runs `connrate connect` (`kubectl exec`): %d goroutines open TCP connections to the", c.workers)
	w("ClusterIP as fast as they can for %d s, each a blocking connect closed at once with", c.seconds)
	w("a reset (SO_LINGER 0, so no port waits in TIME_WAIT), each from a source port no")
	w("other connection of the pod used: every connection is new to every connection")
	w("tracker on its way (a measurement ends early once it has used its 7000 ports: a pod")
	w("holding more conntrack entries than its share is refused new connections while the")
	w("node's tables are under pressure, and the run would measure that, not translation).")
	w("Every measurement has a fresh client pod (lockstep's and netfilter's tracking")
	w("entries of an earlier pod cannot serve it) and one unmeasured second first.")
	w("")
	w("Three modes, set in lockstep-config with the agents restarted, as a user would:")
	w("")
	w("- *%s*: the eBPF dataplane translates (`service-translation: \"true\"`) and routes", modeLockstep)
	w("  (`host-routing: \"true\"`), the defaults: from_pod picks the backend before policy,")
	w("  and the connection's packets skip both nodes' stacks (README, Host routing).")
	w("- *%s*: `service-translation: \"false\"`: kube-proxy's DNAT in the client", modeKubeProxy)
	w("  node's netfilter translates (lockstep judges policy on the ClusterIP); lockstep")
	w("  still routes what is addressed to a pod, so the backend node's side of each")
	w("  connection skips its stack as in the first mode.")
	w("- *%s*: `host-routing: \"false\"` as well: kube-proxy translates and both", modeKernel)
	w("  nodes' stacks forward every packet, as on a node whose pod network routes")
	w("  through the kernel.")
	w("")
	w("The modes share everything else, cluster, pods and run. Each measurement checks who")
	w("translated: the packet counter of kube-proxy's rule for the ClusterIP on %s must", clientNode)
	w("grow by every connection under kube-proxy and by none under lockstep. *pod IP* is the")
	w("reference without a Service: the same client to the first backend's address, in the")
	w("mode the round starts in. %d rounds after an unmeasured one; in each the modes take", c.rounds)
	w("turns, starting with the previous round's last (%s), and the Services take turns", firstCounts(c.rounds))
	w("within a mode.")
	w("")
	w("Connections/s, the median of the rounds and their range:")
	w("")
	writeModeTable(w, func(m string, n int) string {
		v := c.rates(m, n)
		median := fmtRate(medianOf(v))
		if n > 0 {
			median = "**" + median + "**"
		}
		return median + " (" + fmtRange(v, fmtRate) + ")"
	})
	w("")
	w("lockstep's rate ÷ each kube-proxy mode's: the ratio of the medians, then the median")
	w("and range of the rounds' own ratios:")
	w("")
	w("| Service | lockstep ÷ peer | ratio of medians | per round: median | range |")
	w("|---|---|---:|---:|---|")
	times := func(x float64) string { return fmt.Sprintf("%.2f×", x) }
	for _, peer := range peers {
		for _, n := range backendCounts {
			rr := c.roundRatios(n, peer)
			w("| ClusterIP, %s | %s | **%.2f×** | %.2f× | %s |", plural(n, "backend"), peer, c.ratio(n, peer), medianOf(rr), fmtRange(rr, times))
		}
	}
	w("")
	w("How long one connect took (SYN out to SYN-ACK in, and the system call), the")
	w("median over the rounds of each measurement's p50 / p99, in µs:")
	w("")
	p50 := func(s connSample) float64 { return s.connectP50 }
	p99 := func(s connSample) float64 { return s.connectP99 }
	writeModeTable(w, func(m string, n int) string {
		return fmt.Sprintf("%.0f / %.0f", medianOf(c.values(m, n, p50)), medianOf(c.values(m, n, p99)))
	})
	w("")
	w("Every measurement, in the order taken (connections/s; failed connections; connect")
	w("p50 and p99 in µs; the 1-minute load average as it started):")
	w("")
	w("| round | measured | connections/s | connections | failed | connect p50 | p99 | kube-proxy translated | load |")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range c.samples {
		what := "pod IP"
		if s.backends > 0 {
			what = fmt.Sprintf("%s, %s", s.mode, plural(s.backends, "backend"))
		}
		w("| %d | %s | %.0f | %d | %d | %.0f | %.0f | %d | %s |", s.round, what, s.rate, s.conns, s.failures, s.connectP50, s.connectP99, s.kubeProxyNAT, s.load)
	}
	w("")
}

// writeModeTable writes a table with cell's text for each Service and
// mode; the pod IP's row has it in the first mode's column.
func writeModeTable(w func(string, ...any), cell func(mode string, backends int) string) {
	w("| Service | %s |", strings.Join(modes, " | "))
	w("|---|%s", strings.Repeat("---:|", len(modes)))
	for _, n := range backendCounts {
		cells := []string{"ClusterIP, " + plural(n, "backend")}
		for _, m := range modes {
			cells = append(cells, cell(m, n))
		}
		w("| %s |", strings.Join(cells, " | "))
	}
	w("| pod IP (no Service) | %s |%s", cell("", 0), strings.Repeat(" |", len(modes)-1))
}

// firstCounts says how often each mode went first in rounds rounds.
func firstCounts(rounds int) string {
	n := map[string]int{}
	for r := 1; r <= rounds; r++ {
		n[roundOrder(r)[0]]++
	}
	var out []string
	for _, m := range modes {
		out = append(out, fmt.Sprintf("%s first in %d", m, n[m]))
	}
	return strings.Join(out, ", ")
}

func fmtRate(x float64) string { return fmt.Sprintf("%.0f", x) }

// fmtRange renders the smallest and largest of v.
func fmtRange(v []float64, f func(float64) string) string {
	if len(v) == 0 {
		return ""
	}
	return f(slices.Min(v)) + "-" + f(slices.Max(v))
}

func (r *report) writeVerdict(w func(string, ...any)) {
	v := r.verdict
	w("### Per-packet cost of translation")
	w("")
	w("agent/datapath's `BenchmarkPrivilegedServiceVerdict`, run by `go test -bench` %d times with", v.count)
	w("%d runs per case: each run is one BPF_PROG_TEST_RUN on the original frame (the kernel's", v.runs)
	w("own per-run time, no syscall), the cases of a group in turns, run by run, in an order")
	w("that rotates. A case's time is the median of its runs; *added* is the median, over")
	w("the runs, of a case's time minus the untranslated case's in the same turn. The table")
	w("gives the median of the %d go test runs and their range. *established*: from_pod, a", v.count)
	w("packet of an established connection to a pod (untranslated) and through a ClusterIP")
	w("(translated, from the CPU's flow cache, then rewritten; *same-port*: the Service port")
	w("is the backend's, only the address changes). *reply*: to_pod, the backend's reply")
	w("(translated back to the ClusterIP). *new*: a new connection to a pod, and through a")
	w("frontend of 1 and of 100 backends (a backend picked, policy judged, two tracking")
	w("entries made).")
	w("")
	w("| group | case | ns per packet | range | added by translation | range |")
	w("|---|---|---:|---|---:|---|")
	ns := func(x float64) string { return fmt.Sprintf("%.0f", x) }
	for _, m := range verdictMetrics {
		kase, ok := strings.CutSuffix(m.metric, "-p50-ns")
		if !ok || strings.HasSuffix(kase, "-added") {
			continue
		}
		k := verdictKey(m)
		lo, hi := v.span(k)
		added, addedRange := "", ""
		if ak := (verdictKey{m.group, kase + "-added-p50-ns"}); v.values[ak] != nil {
			alo, ahi := v.span(ak)
			added, addedRange = fmt.Sprintf("**%.0f**", v.median(ak)), ns(alo)+"-"+ns(ahi)
		}
		w("| %s | %s | %.0f | %s-%s | %s | %s |", m.group, kase, v.median(k), ns(lo), ns(hi), added, addedRange)
	}
	w("")
}

func (r *report) writeChange(w func(string, ...any)) {
	c := r.change
	w("### Service change → applied")
	w("")
	w("The synthetic cluster of test/benchcluster in an agent store: %d remote pods,", c.pods)
	w("%d NetworkPolicies (policybench's), and one ClusterIP Service per app whose", c.policies)
	w("EndpointSlice lists its %d replicas: %d frontends, %d backends applied. %d local", benchcluster.Replicas, c.frontends, c.backends, benchcluster.LocalEndpoints)
	w("endpoints on real veths in a throwaway netns with the programs attached (first Sync %s).", benchkit.FmtDur(c.firstSync))
	w("Each change is one EndpointSlice update, as the API server sends them: one backend")
	w("of one Service replaced by a new pod's address (Services spread over the cluster).")
	w("The time runs from the store write transaction to `enforcer.Sync` returning: read")
	w("the change log, compile incrementally, apply to the maps and flip the generation")
	w("(Sync's phases are timed inside it). *Spaced*: %d changes, each %s after the", c.changes, changePause)
	w("previous Sync, the common case. *Back to back*: %d changes at once after each", c.changes)
	w("other: an Apply writes the idle copy only once an RCU grace period has passed since")
	w("the previous flip, so each waits for most of one.")
	w("")
	w("| | p50 | p90 | p99 | max |")
	w("|---|---:|---:|---:|---:|")
	row := func(name string, d []time.Duration) {
		w("| %s | %s | %s | %s | %s |", name, benchkit.FmtDur(benchkit.Percentile(d, 50)), benchkit.FmtDur(benchkit.Percentile(d, 90)),
			benchkit.FmtDur(benchkit.Percentile(d, 99)), benchkit.FmtDur(benchkit.Percentile(d, 100)))
	}
	row("**spaced, end to end** (write → Sync returned)", c.spaced)
	row("store write transaction (the upsert)", c.write)
	row("Sync: read the change log", c.feed)
	row("Sync: incremental compile", c.compile)
	row("Sync: apply", c.apply)
	row("**back to back, end to end**", c.backToBack)
	w("")
	if c.skipped > 0 {
		w("%d of the spaced changes were applied as nothing to do (the compiled state did not change).", c.skipped)
		w("")
	}
}
