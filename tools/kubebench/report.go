//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

// fileSection is the part of the output file kubebench owns.
var fileSection = benchkit.Section{Tool: "kubebench", After: "policybench"}

// targetBurst is the target for the whole burst.
const targetBurst = 2 * time.Second

// writesPrefix starts the unit of each per-resource write count the
// benchmark reports, after the phase's prefix.
const writesPrefix = "writes:"

// ipamPrefix starts the units of the allocations-only phase.
const ipamPrefix = "ipam-"

// result is what one run of the benchmark reported.
type result struct {
	pods, parallel int
	cni            phase // pods ADDed through lockstep-cni
	ipam           phase // allocations alone, on the agent's socket
}

// phase is one timed burst of the benchmark.
type phase struct {
	burst         time.Duration // first ADD started → last ADD returned
	reported      time.Duration // first ADD started → NodeIPAM status shows every pod
	podsPerSecond float64
	p50, p99      time.Duration // per-ADD latency
	writes        map[string]int
	writesTotal   int
}

// parseBenchmark reads go test's output: the benchmark's line holds the
// iteration count, then value-unit pairs.
func parseBenchmark(r io.Reader) (*result, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasPrefix(f[0], benchmark+"-") && f[0] != benchmark {
			continue
		}
		metrics := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("parse %q in %q: %w", f[i], sc.Text(), err)
			}
			metrics[f[i+1]] = v
		}
		return resultOf(metrics)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read go test output: %w", err)
	}
	return nil, fmt.Errorf("go test printed no %s line", benchmark)
}

// resultOf picks the benchmark's metrics by unit; each must be there.
func resultOf(m map[string]float64) (*result, error) {
	var missing []string
	get := func(unit string) float64 {
		v, ok := m[unit]
		if !ok {
			missing = append(missing, unit)
		}
		return v
	}
	phaseOf := func(prefix string) phase {
		seconds := func(unit string) time.Duration { return time.Duration(get(prefix+unit) * float64(time.Second)) }
		millis := func(unit string) time.Duration { return time.Duration(get(prefix+unit) * float64(time.Millisecond)) }
		p := phase{
			burst:         seconds("s/burst"),
			reported:      seconds("s/reported"),
			podsPerSecond: get(prefix + "pods/s"),
			p50:           millis("ms/add-p50"),
			p99:           millis("ms/add-p99"),
			writesTotal:   int(get(prefix + "writes-total")),
			writes:        map[string]int{},
		}
		for unit, v := range m {
			if res, ok := strings.CutPrefix(unit, prefix+writesPrefix); ok {
				p.writes[res] = int(v)
			}
		}
		return p
	}
	r := &result{
		pods:     int(get("pods")),
		parallel: int(get("parallel-adds")),
		cni:      phaseOf(""),
		ipam:     phaseOf(ipamPrefix),
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%s reported no %s", benchmark, strings.Join(missing, ", "))
	}
	return r, nil
}

// report is one run, ready to be written.
type report struct {
	machine   benchkit.Machine
	apiserver string
	res       *result
}

// section renders the kubebench section, markers included.
func (r *report) section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	res := r.res
	w("%s", fileSection.Begin())
	w("## Kubernetes IPAM: %d pods on one node with the API server running", res.pods)
	w("")
	w("_Written by `tools/kubebench` (`make bench`); do not edit by hand._")
	w("")
	w("test/twonode's `%s` on one simulated node: a real etcd and", benchmark)
	w("kube-apiserver (test/kubetest), `lockstep operator` and `lockstep agent")
	w("--node-name` (Kubernetes mode, eBPF dataplane) run as the built binary, the agent")
	w("in the node's network namespace. The IPPool has /24 blocks and the operator runs")
	w("with `--min-free 1024`: a node that expects a burst of N pods keeps N addresses")
	w("free ahead of demand, and the operator assigns more blocks as they are used.")
	w("The %d Pod objects exist, bound to the node, before the agent starts.", res.pods)
	w("")
	w("- **Pods**: %d pods ADDed through lockstep-cni by libcni, %d at a time, each in", res.pods, res.parallel)
	w("  a network namespace created before the clock starts. The time runs from the")
	w("  first ADD's start to the last ADD's return and includes every plugin start,")
	w("  veth, address and route, the agent's fsync'd allocation, and the eBPF policy")
	w("  put in force. No ADD waits for the API server. Every address is checked unique")
	w("  and inside the node's blocks. Then they are all DELed (not timed).")
	w("- **Allocations alone**: %d ADD requests straight to the agent's socket, %d at", res.pods, res.parallel)
	w("  a time: lockstep-cni's first step, the IPAM part of a pod start (an fsync'd")
	w("  allocation each), without starting the plugin or wiring anything. The same")
	w("  checks, then they are all aborted (not timed).")
	w("- **Reported**: from the first ADD's start until the node's NodeIPAM status")
	w("  reports all %d (the agent batches its usage reports).", res.pods)
	w("- **API server writes**: the API server's own `apiserver_request_total` for")
	w("  POST, PUT, PATCH, APPLY and DELETE over that whole window, by resource, whoever")
	w("  sent them: the agent (nodeipams/status), the operator (nodeipams, ippools)")
	w("  and the API server itself (e.g. leases).")
	w("")
	w("### Machine")
	w("")
	b.WriteString(benchkit.Table(r.machine.Rows([2]string{"kube-apiserver", r.apiserver})))
	w("")
	w("### %d pods on one node", res.pods)
	w("")
	w("| | pods through lockstep-cni | allocations alone |")
	w("|---|---:|---:|")
	w("| **wall time, first ADD to last** | **%s** | **%s** |", fmtSeconds(res.cni.burst), fmtSeconds(res.ipam.burst))
	w("| throughput | %.0f pods/s | %.0f pods/s |", res.cni.podsPerSecond, res.ipam.podsPerSecond)
	w("| ADD latency p50 (%d in flight) | %s | %s |", res.parallel, benchkit.FmtDur(res.cni.p50), benchkit.FmtDur(res.ipam.p50))
	w("| ADD latency p99 | %s | %s |", benchkit.FmtDur(res.cni.p99), benchkit.FmtDur(res.ipam.p99))
	w("| until the NodeIPAM status reports all %d | %s | %s |", res.pods, fmtSeconds(res.cni.reported), fmtSeconds(res.ipam.reported))
	w("| **API server write requests** | **%d** | **%d** |", res.cni.writesTotal, res.ipam.writesTotal)
	w("")
	w("### API server write requests by resource")
	w("")
	w("| resource | pods through lockstep-cni | allocations alone |")
	w("|---|---:|---:|")
	keys := slices.Collect(maps.Keys(res.cni.writes))
	for k := range res.ipam.writes {
		if _, ok := res.cni.writes[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		w("| %s | %d | %d |", k, res.cni.writes[k], res.ipam.writes[k])
	}
	w("")
	w("### Targets")
	w("")
	w("| target | measured | result |")
	w("|---|---|---|")
	w("| %d pods through lockstep-cni on one node ≤ %s | %s | %s |", res.pods, fmtSeconds(targetBurst), fmtSeconds(res.cni.burst), verdict(res.cni.burst))
	w("| %d allocations alone on one node ≤ %s | %s | %s |", res.pods, fmtSeconds(targetBurst), fmtSeconds(res.ipam.burst), verdict(res.ipam.burst))
	w("| API server writes per %d pods (report the count) | %d, of which %d NodeIPAM status | reported |",
		res.pods, res.cni.writesTotal, res.cni.writes["nodeipams/status"])
	w("%s", fileSection.End())
	return b.String()
}

// verdict is PASS when d meets targetBurst.
func verdict(d time.Duration) string {
	if d > targetBurst {
		return "**FAIL**"
	}
	return "PASS"
}

func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
