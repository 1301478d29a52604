//go:build linux

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"lockstep.dev/lockstep/test/benchkit"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
)

// execFloorRounds is how many timed CNI VERSION calls measure the exec floor,
// after as many again untimed.
const execFloorRounds = 50

// side is one plugin under test: its node, its pods and what was measured.
type side struct {
	name       string // as shown in the report
	key        string // short, unique; part of container IDs
	pluginType string // the plugin binary asked for VERSION
	node       *nodesim.Node
	hasAgent   bool // the node runs a lockstep agent whose log explains failures

	latencyPods []ns.NetNS
	burstPods   []ns.NetNS

	add, del, addDel []time.Duration
	addCPU           []time.Duration // plugin CPU (user+sys) of each timed ADD
	execFloor        []time.Duration // wall time of each timed CNI VERSION
	execCPU          []time.Duration // plugin CPU of each timed CNI VERSION
	burst            burstResult
}

// burstResult is what one burst measured and found.
type burstResult struct {
	pods      int
	addWall   time.Duration
	addCPU    time.Duration   // plugin CPU (user+sys) of all the ADDs
	addEach   []time.Duration // per-pod ADD time, successful ADDs only
	addOK     int
	uniqueIPs int
	delWall   time.Duration
	delOK     int
	problems  []string // the first few failures, for the report
}

// maxProblems bounds how many burst failures are quoted.
const maxProblems = 3

// runtimeConf names pod i of a phase the way a kubelet would.
func (s *side) runtimeConf(phase string, i int, pod ns.NetNS) *libcni.RuntimeConf {
	id := fmt.Sprintf("cnibench-%s-%s-%05d", s.key, phase, i)
	return nodesim.Runtime(id, pod, "eth0", "cnibench", fmt.Sprintf("%s-%s-%d", s.key, phase, i))
}

// sample is what one latency iteration measured.
type sample struct {
	add, addCPU, del time.Duration
}

// iterate runs one ADD and the DEL of the same pod, timing each call and
// the CPU the ADD's plugin processes used.
func (s *side) iterate(ctx context.Context, i int) (sample, error) {
	var m sample
	rt := s.runtimeConf("lat", i, s.latencyPods[i])
	cpu := childCPU()
	start := time.Now()
	res, err := s.node.Add(ctx, rt)
	m.add = time.Since(start)
	m.addCPU = childCPU() - cpu
	if err != nil {
		return m, fmt.Errorf("add pod %d: %w%s", i, err, s.agentLogTail())
	}
	if ips, err := addresses(res); err != nil || len(ips) == 0 {
		return m, fmt.Errorf("add pod %d: result carries no address (%v)", i, err)
	}
	start = time.Now()
	err = s.node.Del(ctx, rt)
	m.del = time.Since(start)
	if err != nil {
		return m, fmt.Errorf("del pod %d: %w%s", i, err, s.agentLogTail())
	}
	return m, nil
}

// starter is a binary whose start measureExecFloor times: a side's plugin
// or the hello-world reference.
type starter struct {
	name, pluginType string
	cni              *libcni.CNIConfig
	wall, cpu        *[]time.Duration
}

// version times one CNI VERSION call: the wall time of libcni's call and
// the CPU of the process it started.
func (st starter) version(ctx context.Context) (wall, cpu time.Duration, err error) {
	before := childCPU()
	start := time.Now()
	_, err = st.cni.GetVersionInfo(ctx, st.pluginType)
	wall = time.Since(start)
	cpu = childCPU() - before
	if err != nil {
		return 0, 0, fmt.Errorf("%s: ask %s for VERSION: %w", st.name, st.pluginType, err)
	}
	return wall, cpu, nil
}

// measureExecFloor times CNI VERSION for both plugins and the hello-world
// reference, taking turns.
func (b *bench) measureExecFloor(ctx context.Context) error {
	var starters []starter
	for _, s := range b.sides {
		starters = append(starters, starter{name: s.name, pluginType: s.pluginType, cni: s.node.CNI, wall: &s.execFloor, cpu: &s.execCPU})
	}
	h := b.hello
	starters = append(starters, starter{name: helloName, pluginType: helloType, cni: h.cni, wall: &h.execFloor, cpu: &h.execCPU})
	logf("exec floor: %d CNI VERSION calls per plugin and the %s (+%d warm-up)", execFloorRounds, helloName, execFloorRounds)
	for i := range 2 * execFloorRounds {
		for _, st := range alternate(starters, i) {
			if err := ctx.Err(); err != nil {
				return err
			}
			wall, cpu, err := st.version(ctx)
			if err != nil {
				return err
			}
			if i >= execFloorRounds {
				*st.wall = append(*st.wall, wall)
				*st.cpu = append(*st.cpu, cpu)
			}
		}
	}
	return nil
}

// measureLatency runs the sequential ADD+DEL iterations, the plugins taking
// turns (and turns about going first) so that drift in the machine's load
// lands on both.
func (b *bench) measureLatency(ctx context.Context) error {
	total := b.cfg.warmup + b.cfg.n
	logf("latency: %d sequential ADD+DEL per plugin (%d warm-up + %d timed)", total, b.cfg.warmup, b.cfg.n)
	prog := benchkit.NewProgress("latency iterations", total, logf)
	for i := range total {
		for _, s := range alternate(b.sides, i) {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := s.iterate(ctx, i)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("latency, %s: %w", s.name, err)
			}
			if i >= b.cfg.warmup {
				s.add = append(s.add, m.add)
				s.addCPU = append(s.addCPU, m.addCPU)
				s.del = append(s.del, m.del)
				s.addDel = append(s.addDel, m.add+m.del)
			}
		}
		prog.Step()
	}
	return nil
}

// runBurst ADDs every burst pod at once, checks the results, then DELs them
// all at once. It returns an error when an ADD or DEL failed or two pods got
// the same address; the result is recorded either way.
func (s *side) runBurst(ctx context.Context) error {
	n := len(s.burstPods)
	logf("burst, %s: %d pods ADDed at once", s.name, n)
	rts := make([]*libcni.RuntimeConf, n)
	for i, pod := range s.burstPods {
		rts[i] = s.runtimeConf("burst", i, pod)
	}
	r := burstResult{pods: n}

	ips := make([][]string, n)
	addErrs := make([]error, n)
	each := make([]time.Duration, n)
	cpu := childCPU()
	r.addWall = all(n, func(i int) {
		start := time.Now()
		res, err := s.node.Add(ctx, rts[i])
		each[i] = time.Since(start)
		if err == nil {
			ips[i], err = addresses(res)
		}
		addErrs[i] = err
	})
	r.addCPU = childCPU() - cpu
	if err := ctx.Err(); err != nil {
		return err
	}
	seen := make(map[string]int)
	for i, err := range addErrs {
		switch {
		case err != nil:
			r.problem(fmt.Sprintf("ADD pod %d: %v", i, err))
		case len(ips[i]) == 0:
			r.problem(fmt.Sprintf("ADD pod %d: result carries no address", i))
		default:
			r.addOK++
			r.addEach = append(r.addEach, each[i])
			for _, ip := range ips[i] {
				if j, dup := seen[ip]; dup {
					r.problem(fmt.Sprintf("pods %d and %d both got %s", j, i, ip))
					continue
				}
				seen[ip] = i
			}
		}
	}
	r.uniqueIPs = len(seen)
	logf("burst, %s: %d/%d ADDs in %s; DELing them at once", s.name, r.addOK, n, benchkit.FmtDur(r.addWall))

	delErrs := make([]error, n)
	r.delWall = all(n, func(i int) { delErrs[i] = s.node.Del(ctx, rts[i]) })
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, err := range delErrs {
		if err != nil {
			r.problem(fmt.Sprintf("DEL pod %d: %v", i, err))
			continue
		}
		r.delOK++
	}
	s.burst = r
	if !r.ok() {
		return fmt.Errorf("burst, %s: %s%s", s.name, strings.Join(r.problems, "; "), s.agentLogTail())
	}
	return nil
}

func (r *burstResult) problem(p string) {
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, p)
	}
}

// ok reports whether every ADD and DEL succeeded with unique addresses.
func (r *burstResult) ok() bool {
	return r.pods > 0 && r.addOK == r.pods && r.delOK == r.pods && len(r.problems) == 0
}

// all runs f(0..n-1) on n goroutines released at the same instant and
// returns the wall time from release until the last one finished.
func all(n int, f func(i int)) time.Duration {
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			f(i)
		}()
	}
	ready.Wait()
	start := time.Now()
	close(gate)
	done.Wait()
	return time.Since(start)
}

// childCPU returns the user+sys CPU time of every child process reaped so
// far, grandchildren they reaped included (host-local under ptp). Plugins
// are children of this process; the lockstep agent is not reaped until the
// end, so its CPU is never counted.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alternate returns xs in order on even rounds and reversed on odd ones, so
// that no plugin always runs right after the same other one.
func alternate[T any](xs []T, round int) []T {
	if round%2 == 0 {
		return xs
	}
	rev := slices.Clone(xs)
	slices.Reverse(rev)
	return rev
}

// addresses lists the addresses (without prefix length) an ADD returned.
func addresses(res types.Result) ([]string, error) {
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("read ADD result: %w", err)
	}
	out := make([]string, 0, len(r.IPs))
	for _, ip := range r.IPs {
		out = append(out, ip.Address.IP.String())
	}
	return out, nil
}

// agentLogTail returns the end of the agent log for an error message, or
// nothing when the side has no agent or it logged nothing.
func (s *side) agentLogTail() string {
	if !s.hasAgent {
		return ""
	}
	log := strings.TrimSpace(s.node.AgentLog())
	if log == "" {
		return ""
	}
	lines := strings.Split(log, "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\nagent log (last lines):\n" + strings.Join(lines, "\n")
}
