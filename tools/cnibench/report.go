//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"lockstep.dev/lockstep/internal/benchkit"
)

// fileSection is the part of the output file cnibench owns; the file starts
// with fileIntro when cnibench creates it.
var fileSection = benchkit.Section{Tool: "cnibench", Intro: fileIntro}

// fileIntro starts the output file when cnibench creates it.
const fileIntro = `# Benchmarks

Every number in this file is measured. Each section below is written by a
tool under ` + "`tools/`" + ` and rewritten in place, between its own markers, on every
run; do not edit inside a section. To refresh them all, run ` + "`make bench`" + ` as
root (the tools build throwaway network namespaces; nothing on the machine's
own interfaces, routes or firewall is touched) and commit the result with the
change it measures.
`

// The targets lockstep is held to.
const (
	targetAddP50      = 2 * time.Millisecond
	targetAddP99      = 10 * time.Millisecond
	targetVsReference = 0.5 // lockstep ADD p50 at most this share of ptp's
	targetBurstPerSec = 500.0
)

// report is what one run measured, ready to render.
type report struct {
	cfg   config
	facts facts
	sides []*side
}

// target is one line of the targets table.
type target = benchkit.Target

func (r *report) side(key string) *side {
	for _, s := range r.sides {
		if s.key == key {
			return s
		}
	}
	return &side{}
}

// targets checks the measured numbers against lockstep's targets.
func (r *report) targets() []target {
	ls, ref := r.side(lockstepKey), r.side(referenceKey)
	add, refAdd := summarize(ls.add), summarize(ref.add)
	ratio := 0.0
	if refAdd.p50 > 0 {
		ratio = float64(add.p50) / float64(refAdd.p50)
	}
	rate := perSecond(ls.burst.pods, ls.burst.addWall)
	burst := fmt.Sprintf("%.0f pods/s (%d pods in %s)", rate, ls.burst.pods, benchkit.FmtDur(ls.burst.addWall))
	if !ls.burst.ok() {
		burst += fmt.Sprintf("; only %d/%d ADDs succeeded cleanly", ls.burst.addOK, ls.burst.pods)
	}
	return []target{{
		Name:     "lockstep ADD p50 ≤ " + benchkit.FmtDur(targetAddP50),
		Measured: benchkit.FmtDur(add.p50),
		Pass:     add.n > 0 && add.p50 <= targetAddP50,
	}, {
		Name:     "lockstep ADD p99 ≤ " + benchkit.FmtDur(targetAddP99),
		Measured: benchkit.FmtDur(add.p99),
		Pass:     add.n > 0 && add.p99 <= targetAddP99,
	}, {
		Name:     "lockstep ADD p50 ≤ ½ × " + referenceName + " ADD p50",
		Measured: fmt.Sprintf("%s vs %s (%.2f×)", benchkit.FmtDur(add.p50), benchkit.FmtDur(refAdd.p50), ratio),
		Pass:     add.n > 0 && refAdd.n > 0 && ratio <= targetVsReference,
	}, {
		Name:     fmt.Sprintf("lockstep burst ADD ≥ %.0f pods/s", targetBurstPerSec),
		Measured: burst,
		Pass:     ls.burst.ok() && rate >= targetBurstPerSec,
	}}
}

// section renders the cnibench section, markers included.
func (r *report) section() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	row := func(name string, cell func(*side) string) {
		cells := make([]string, len(r.sides))
		for i, s := range r.sides {
			cells[i] = cell(s)
		}
		w("| %s | %s |", name, strings.Join(cells, " | "))
	}
	header := func(first string) {
		names := make([]string, len(r.sides))
		for i, s := range r.sides {
			names[i] = s.name
		}
		w("| %s | %s |", first, strings.Join(names, " | "))
		w("|---|%s", strings.Repeat("---:|", len(r.sides)))
	}

	w("%s", fileSection.Begin())
	w("## CNI ADD/DEL: lockstep vs ptp + host-local")
	w("")
	w("_Written by `tools/cnibench` (`make bench`); do not edit by hand._")
	w("")
	w("Both plugins are driven by the same libcni harness (`internal/nodesim`): each")
	w("plugin binary is exec'd inside its own simulated node network namespace, as a")
	w("container runtime would, and every pod has its own network namespace created")
	w("before any clock starts. Times are the wall time of libcni `AddNetworkList` and")
	w("`DelNetworkList`, so they include starting the plugin process. The lockstep")
	w("agent (pool `%s`) keeps its state file on disk (%s) and fsyncs every change;", lockstepPool, r.facts.stateFS)
	w("ptp uses host-local IPAM with its data directory on the same disk.")
	w("")
	w("- **Latency**: %d sequential ADD-then-DEL iterations per plugin after %d untimed", r.cfg.n, r.cfg.warmup)
	w("  ones; the plugins take turns, iteration by iteration. Percentiles are nearest-rank.")
	w("- **Exec floor**: CNI `VERSION` through the same harness, %d calls per plugin:", execFloorRounds)
	w("  what starting the plugin binary costs before it does any work.")
	w("- **Burst**: %d pods ADDed at once from %d goroutines, every ADD checked and every", r.cfg.burst, r.cfg.burst)
	w("  address checked unique; then all DELed at once.")
	w("- **Plugin CPU**: user+sys time of the plugin processes (host-local included under")
	w("  ptp; the lockstep agent, a separate long-lived process, excluded). With N CPUs,")
	w("  N ÷ CPU per ADD bounds burst throughput.")
	w("")

	w("### Machine")
	w("")
	b.WriteString(benchkit.Table(r.facts.Rows(
		[2]string{"reference plugins", r.facts.refPlugins},
		[2]string{"state filesystem", r.facts.stateFS})))
	w("")

	w("### Sequential ADD and DEL latency (%d iterations)", r.cfg.n)
	w("")
	header("")
	for _, m := range []struct {
		name string
		get  func(*side) []time.Duration
	}{
		{"ADD", func(s *side) []time.Duration { return s.add }},
		{"DEL", func(s *side) []time.Duration { return s.del }},
	} {
		row(m.name+" p50", func(s *side) string { return benchkit.FmtDur(summarize(m.get(s)).p50) })
		row(m.name+" p90", func(s *side) string { return benchkit.FmtDur(summarize(m.get(s)).p90) })
		row(m.name+" p99", func(s *side) string { return benchkit.FmtDur(summarize(m.get(s)).p99) })
		row(m.name+" max", func(s *side) string { return benchkit.FmtDur(summarize(m.get(s)).max) })
	}
	row("**ADD+DEL p50**", func(s *side) string { return "**" + benchkit.FmtDur(summarize(s.addDel).p50) + "**" })
	row("exec floor (VERSION) p50", func(s *side) string { return benchkit.FmtDur(summarize(s.execFloor).p50) })
	row("plugin CPU per ADD p50", func(s *side) string { return benchkit.FmtDur(summarize(s.addCPU).p50) })
	w("")

	w("### Burst (%d pods at once)", r.cfg.burst)
	w("")
	header("")
	row("ADD wall time", func(s *side) string { return benchkit.FmtDur(s.burst.addWall) })
	row("**ADD throughput**", func(s *side) string {
		return fmt.Sprintf("**%.0f pods/s**", perSecond(s.burst.pods, s.burst.addWall))
	})
	row("ADD per pod p50", func(s *side) string { return benchkit.FmtDur(summarize(s.burst.addEach).p50) })
	row("ADD per pod p99", func(s *side) string { return benchkit.FmtDur(summarize(s.burst.addEach).p99) })
	row("plugin CPU per ADD (mean)", func(s *side) string {
		if s.burst.pods == 0 {
			return benchkit.FmtDur(0)
		}
		return benchkit.FmtDur(s.burst.addCPU / time.Duration(s.burst.pods))
	})
	row("ADDs succeeded", func(s *side) string { return fmt.Sprintf("%d/%d", s.burst.addOK, s.burst.pods) })
	row("unique addresses", func(s *side) string { return fmt.Sprintf("%d", s.burst.uniqueIPs) })
	row("DEL wall time", func(s *side) string { return benchkit.FmtDur(s.burst.delWall) })
	row("DEL throughput", func(s *side) string {
		return fmt.Sprintf("%.0f pods/s", perSecond(s.burst.pods, s.burst.delWall))
	})
	row("DELs succeeded", func(s *side) string { return fmt.Sprintf("%d/%d", s.burst.delOK, s.burst.pods) })
	for _, s := range r.sides {
		for _, p := range s.burst.problems {
			w("")
			w("- %s burst problem: %s", s.name, oneLine(p))
		}
	}
	w("")

	b.WriteString(benchkit.TargetsTable(r.targets()))
	w("%s", fileSection.End())
	return b.String()
}

// oneLine keeps a multi-line error inside one markdown list item.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.ReplaceAll(s, "|", `\|`)
}

// write puts the section into the file at path, replacing only what lies
// between the markers, or prints it to stdout when path is empty.
func (r *report) write(path string, stdout io.Writer) error {
	return fileSection.Write(path, r.section(), stdout)
}
