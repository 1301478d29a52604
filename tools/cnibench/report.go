//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
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

// The targets lockstep is held to (issue 17), each against what the same
// run measured for the reference plugins or the hello world.
const (
	targetAddVsRef     = 0.6                   // ADD p50 at most this share of ptp + host-local's
	targetAddP99       = 10 * time.Millisecond // ADD p99
	targetBurstVsRef   = 1.5                   // burst pods/s at least this many times ptp + host-local's
	targetCPUVsRef     = 0.5                   // plugin CPU per ADD at most this share of ptp + host-local's
	targetStartVsHello = 1.5                   // VERSION start at most this many times the hello world's
)

// report is what one run measured, ready to render.
type report struct {
	cfg   config
	facts facts
	sides []*side
	hello *hello
	sizes binSizes
}

// binSizes are the sizes in bytes of the binaries whose start is measured.
type binSizes struct {
	lockstep, reference, hello int64
}

// target is one line of the targets table.
type target = benchkit.Target

// findSide returns the side with the given key, or an empty one.
func findSide(sides []*side, key string) *side {
	for _, s := range sides {
		if s.key == key {
			return s
		}
	}
	return &side{}
}

func (r *report) side(key string) *side { return findSide(r.sides, key) }

// ratio returns a/b, and false when b is not positive (nothing measured).
func ratio(a, b float64) (float64, bool) {
	if b <= 0 {
		return 0, false
	}
	return a / b, true
}

// helloFloor returns the hello world's VERSION starts, or none when the
// reference was not measured.
func (r *report) helloFloor() (wall, cpu []time.Duration) {
	if r.hello == nil {
		return nil, nil
	}
	return r.hello.execFloor, r.hello.execCPU
}

// targets checks the measured numbers against lockstep's targets.
func (r *report) targets() []target {
	ls, ref := r.side(lockstepKey), r.side(referenceKey)
	add, refAdd := summarize(ls.add), summarize(ref.add)
	addRatio, addOK := ratio(float64(add.p50), float64(refAdd.p50))

	rate, refRate := perSecond(ls.burst.pods, ls.burst.addWall), perSecond(ref.burst.pods, ref.burst.addWall)
	burstRatio, burstOK := ratio(rate, refRate)
	burst := fmt.Sprintf("%.0f vs %.0f pods/s (%.2f×)", rate, refRate, burstRatio)
	if !ls.burst.ok() {
		burst += fmt.Sprintf("; only %d/%d lockstep ADDs succeeded cleanly", ls.burst.addOK, ls.burst.pods)
	}

	cpu, refCPU := summarize(ls.addCPU), summarize(ref.addCPU)
	cpuRatio, cpuOK := ratio(float64(cpu.p50), float64(refCPU.p50))

	helloWall, helloCPU := r.helloFloor()
	start, helloStart := summarize(ls.execFloor), summarize(helloWall)
	startRatio, startOK := ratio(float64(start.p50), float64(helloStart.p50))
	startCPURatio, _ := ratio(float64(summarize(ls.execCPU).p50), float64(summarize(helloCPU).p50))

	return []target{{
		Name:     fmt.Sprintf("lockstep ADD p50 ≤ %.1f × %s's", targetAddVsRef, referenceName),
		Measured: fmt.Sprintf("%s vs %s (%.2f×)", benchkit.FmtDur(add.p50), benchkit.FmtDur(refAdd.p50), addRatio),
		Pass:     add.n > 0 && addOK && addRatio <= targetAddVsRef,
	}, {
		Name:     "lockstep ADD p99 ≤ " + benchkit.FmtDur(targetAddP99),
		Measured: benchkit.FmtDur(add.p99),
		Pass:     add.n > 0 && add.p99 <= targetAddP99,
	}, {
		Name:     fmt.Sprintf("lockstep %d-pod burst ≥ %.1f × %s's pods/s", r.cfg.burst, targetBurstVsRef, referenceName),
		Measured: burst,
		Pass:     ls.burst.ok() && burstOK && burstRatio >= targetBurstVsRef,
	}, {
		Name:     fmt.Sprintf("lockstep plugin CPU per ADD p50 ≤ %.1f × %s's", targetCPUVsRef, referenceName),
		Measured: fmt.Sprintf("%s vs %s (%.2f×)", benchkit.FmtDur(cpu.p50), benchkit.FmtDur(refCPU.p50), cpuRatio),
		Pass:     cpu.n > 0 && cpuOK && cpuRatio <= targetCPUVsRef,
	}, {
		Name:     fmt.Sprintf("lockstep `VERSION` start p50 ≤ %.1f × a %s's", targetStartVsHello, helloName),
		Measured: fmt.Sprintf("%s vs %s (%.2f×; CPU %.2f×)", benchkit.FmtDur(start.p50), benchkit.FmtDur(helloStart.p50), startRatio, startCPURatio),
		Pass:     start.n > 0 && startOK && startRatio <= targetStartVsHello,
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
	w("Both plugins are driven by the same libcni harness (`probe/nodesim`): each")
	w("plugin binary is exec'd inside its own simulated node network namespace, as a")
	w("container runtime would, and every pod has its own network namespace created")
	w("before any clock starts. Times are the wall time of libcni `AddNetworkList` and")
	w("`DelNetworkList`, so they include starting the plugin process. The lockstep")
	w("agent (pool `%s`) keeps its state file on disk (%s) and fsyncs every change;", lockstepPool, r.facts.stateFS)
	w("ptp uses host-local IPAM with its data directory on the same disk.")
	w("")
	w("- **Latency**: %d sequential ADD-then-DEL iterations per plugin after %d untimed", r.cfg.n, r.cfg.warmup)
	w("  ones; the plugins take turns, iteration by iteration. Percentiles are nearest-rank.")
	w("- **Start**: CNI `VERSION` through the same harness, %d calls per plugin, taking", execFloorRounds)
	w("  turns with a static Go hello world built in the same run (`CGO_ENABLED=0 go build %s`,", shellWords(helloBuildFlags))
	w("  `make build`'s flags) that answers VERSION: what starting the plugin binary costs")
	w("  before it does any work, against what starting any Go binary costs.")
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
	row("plugin CPU per ADD p50", func(s *side) string { return benchkit.FmtDur(summarize(s.addCPU).p50) })
	w("")

	b.WriteString(r.startTable())
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

// startTable renders the VERSION starts of the plugins and the hello world.
func (r *report) startTable() string {
	helloWall, helloCPU := r.helloFloor()
	type column struct {
		name      string
		wall, cpu []time.Duration
		size      int64
	}
	cols := []column{
		{r.side(lockstepKey).name, r.side(lockstepKey).execFloor, r.side(lockstepKey).execCPU, r.sizes.lockstep},
		{r.side(referenceKey).name, r.side(referenceKey).execFloor, r.side(referenceKey).execCPU, r.sizes.reference},
		{helloName, helloWall, helloCPU, r.sizes.hello},
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	row := func(name string, cell func(column) string) {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(c)
		}
		w("| %s | %s |", name, strings.Join(cells, " | "))
	}
	w("### Start: CNI `VERSION` (%d calls each)", execFloorRounds)
	w("")
	row("", func(c column) string { return c.name })
	w("|---|%s", strings.Repeat("---:|", len(cols)))
	row("wall p50", func(c column) string { return benchkit.FmtDur(summarize(c.wall).p50) })
	row("wall p90", func(c column) string { return benchkit.FmtDur(summarize(c.wall).p90) })
	row("CPU p50", func(c column) string { return benchkit.FmtDur(summarize(c.cpu).p50) })
	row("binary size", func(c column) string {
		if c.size == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f MB", float64(c.size)/1e6)
	})
	w("")
	for _, c := range cols[:2] {
		wall, okW := ratio(float64(summarize(c.wall).p50), float64(summarize(helloWall).p50))
		cpu, okC := ratio(float64(summarize(c.cpu).p50), float64(summarize(helloCPU).p50))
		if okW && okC {
			w("- %s starts in %.2f× the hello world's wall time, %.2f× its CPU.", c.name, wall, cpu)
		}
	}
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
