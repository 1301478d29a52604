//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/api"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/benchcluster"
)

// iperfPort is iperf3's default port, the one the policy allows.
const iperfPort = 5201

// The states of the host veths' tc hooks a throughput round measures.
const (
	// modeOn is lockstep enforcing: from_pod and to_pod as the agent
	// attached them.
	modeOn = "on"
	// modePass is a program that only returns TC_ACT_OK on both hooks:
	// the cost of a clsact qdisc and a BPF program being there at all.
	modePass = "pass"
	// modeOff is no clsact qdisc on either host veth.
	modeOff = "off"
)

// throughputModes is the order of the first round; each next round starts
// one later, so that no mode always runs first or right after another.
var throughputModes = []string{modeOn, modePass, modeOff}

// throughputResult is iperf3's received rate in each mode, round by round:
// on[i], pass[i] and off[i] ran back to back.
type throughputResult struct {
	on, pass, off []float64 // bits per second
	// runs is what the kernel's BPF run-time statistics counted during
	// the timed runs, by program: from_pod and to_pod in the on runs, the
	// pass-through program (on all four hooks) in the pass runs. Nil when
	// the kernel could not count.
	runs map[string]progRuns
}

// progRuns is how often a program ran and for how long in all.
type progRuns struct {
	count uint64
	time  time.Duration
}

// perRun is the mean time of one run, 0 without runs.
func (p progRuns) perRun() time.Duration {
	if p.count == 0 {
		return 0
	}
	return p.time / time.Duration(p.count)
}

// add records bps for mode.
func (r *throughputResult) add(mode string, bps float64) {
	switch mode {
	case modeOn:
		r.on = append(r.on, bps)
	case modePass:
		r.pass = append(r.pass, bps)
	case modeOff:
		r.off = append(r.off, bps)
	}
}

// ratios returns on ÷ off of each round.
func (r *throughputResult) ratios() []float64 {
	out := make([]float64, 0, len(r.on))
	for i := range min(len(r.on), len(r.off)) {
		out = append(out, r.on[i]/r.off[i])
	}
	return out
}

// iperfPod is a pod of the throughput node.
type iperfPod struct {
	name, hostIf, netns string
	addr                netip.Addr
}

// throughputManifests are the objects of the throughput node: a client and
// a server pod, and a policy that isolates the server and allows the
// client to reach it on TCP 5201 only.
func throughputManifests() *benchcluster.Cluster {
	tcp := policyapi.TCP
	pod := func(name string) *policyapi.Pod {
		return &policyapi.Pod{
			TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: policyapi.ObjectMeta{Namespace: "bench", Name: name, Labels: map[string]string{"app": name}},
		}
	}
	return &benchcluster.Cluster{
		Namespaces: []*policyapi.Namespace{{
			TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: policyapi.ObjectMeta{Name: "bench"},
		}},
		Pods: []*policyapi.Pod{pod("client"), pod("server")},
		Policies: []*policyapi.NetworkPolicy{{
			TypeMeta:   policyapi.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: policyapi.ObjectMeta{Namespace: "bench", Name: "allow-client"},
			Spec: policyapi.NetworkPolicySpec{
				PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				Ingress: []policyapi.IngressRule{{
					Ports: []policyapi.NetworkPolicyPort{{Protocol: &tcp, Port: policyapi.FromInt(iperfPort)}},
					From:  []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
			},
		}},
	}
}

// benchThroughput runs iperf3 between two pods added through the real CNI
// plugin, in rounds: each round measures lockstep enforcing the policy, a
// pass-through program in its place, and no filter at all, back to back,
// in an order that rotates from round to round. Runs of the modes are
// thus interleaved in time, and a slow spell of a shared machine lands on
// all of them alike. With -iperf-pin the client and the server run on
// CPUs of their own, the same ones in every run.
func (b *bench) benchThroughput(ctx context.Context) (*throughputResult, error) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, fmt.Errorf("find iperf3: %w (make deps installs it)", err)
	}
	dir := filepath.Join(b.work, "iperf-manifests")
	if err := benchcluster.WriteManifests(dir, throughputManifests()); err != nil {
		return nil, err
	}
	node, err := b.newNode(ctx, "iperf-node", dir)
	if err != nil {
		return nil, err
	}
	var pods []*iperfPod
	for _, name := range []string{"client", "server"} {
		p, err := b.addPod(ctx, node, name)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	client, server := pods[0], pods[1]
	h, err := newHooks(node.NS, []string{client.hostIf, server.hostIf})
	if err != nil {
		return nil, err
	}
	b.onCleanup(h.close)

	srv := exec.Command("ip", append([]string{"netns", "exec", server.netns}, b.pinned(serverCPU, "iperf3", "-s", "-B", server.addr.String())...)...)
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start iperf3 server: %w", err)
	}
	b.onCleanup(func() error {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		return nil
	})
	if _, err := b.iperf(ctx, client, server, 1); err != nil {
		return nil, fmt.Errorf("warm-up run: %w", err)
	}

	res := &throughputResult{}
	// The kernel counts programs' runs and run time only while someone
	// holds this open; it adds two clock reads to every run of every
	// program on the machine until it is closed.
	if stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
		logf("  no BPF run-time statistics (%v): the programs' run time in this traffic is not measured", err)
	} else {
		defer stats.Close()
		res.runs = map[string]progRuns{}
	}
	for round := range b.cfg.iperfRounds {
		for i := range throughputModes {
			mode := throughputModes[(round+i)%len(throughputModes)]
			if err := h.set(mode); err != nil {
				return nil, err
			}
			before := h.runStats(mode)
			bps, err := b.iperf(ctx, client, server, b.cfg.iperfSeconds)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, mode, err)
			}
			if res.runs != nil {
				for name, after := range h.runStats(mode) {
					b, ok := before[name]
					if !ok {
						continue // not read before the run: no interval to count
					}
					r := res.runs[name]
					r.count += after.count - b.count
					r.time += after.time - b.time
					res.runs[name] = r
				}
			}
			logf("  round %d, %-4s: %.2f Gbit/s", round+1, mode, bps/1e9)
			res.add(mode, bps)
		}
		logf("  round %d: on ÷ off %.3f", round+1, res.ratios()[round])
	}
	// Leave the node as the agent made it.
	if err := h.set(modeOn); err != nil {
		return nil, err
	}
	logf("  median on %.2f, pass %.2f, off %.2f Gbit/s; on ÷ off %.3f (per round %s, median %.3f)",
		median(res.on)/1e9, median(res.pass)/1e9, median(res.off)/1e9, median(res.on)/median(res.off), fmtRatios(res.ratios()), median(res.ratios()))
	if res.runs != nil {
		logf("  BPF run time per run: %s", res.runTimes())
	}
	return res, nil
}

// runTimes formats the mean run time and run count of each program, or
// says they were not measured.
func (r *throughputResult) runTimes() string {
	if r.runs == nil {
		return "not measured (no BPF run-time statistics on this kernel)"
	}
	var parts []string
	for _, name := range []string{"from_pod", "to_pod", "pass"} {
		p := r.runs[name]
		parts = append(parts, fmt.Sprintf("%s %d ns (%d runs)", name, p.perRun().Nanoseconds(), p.count))
	}
	return strings.Join(parts, ", ")
}

// fmtRatios formats ratios for a log line or a table cell.
func fmtRatios(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = strconv.FormatFloat(r, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

// CPUs the iperf3 client and server are pinned to with -iperf-pin: the
// client's CPU also runs the softirq work of the path (veth transmit, both
// hooks, routing), the server's copies to user space.
const (
	clientCPU = 0
	serverCPU = 1
)

// pinned returns the command line that runs args on cpu (through taskset)
// if -iperf-pin asks for it and the machine has two CPUs or more, or args
// alone.
func (b *bench) pinned(cpu int, args ...string) []string {
	if !b.cfg.iperfPin || runtime.NumCPU() < 2 {
		return args
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
}

// hooks switches the tc hooks of a node's host veths between the modes.
type hooks struct {
	netns ns.NetNS
	ifs   []string
	// lockstep holds the programs the agent attached, by hook parent.
	lockstep map[uint32]hookProg
	pass     *ebpf.Program
}

// runStats reads the kernel's run statistics of the programs mode
// attaches, by program name; nil for modeOff or when they cannot be read.
func (h *hooks) runStats(mode string) map[string]progRuns {
	progs := map[string]*ebpf.Program{}
	switch mode {
	case modeOn:
		progs["from_pod"] = h.lockstep[netlink.HANDLE_MIN_INGRESS].prog
		progs["to_pod"] = h.lockstep[netlink.HANDLE_MIN_EGRESS].prog
	case modePass:
		progs["pass"] = h.pass
	}
	out := make(map[string]progRuns, len(progs))
	for name, p := range progs {
		if p == nil {
			continue
		}
		s, err := p.Stats()
		if err != nil {
			return nil
		}
		out[name] = progRuns{count: s.RunCount, time: s.Runtime}
	}
	return out
}

// hookProg is a program attached to a tc hook, and the filter name it had.
type hookProg struct {
	prog *ebpf.Program
	name string
}

// newHooks finds lockstep's filters on the first of ifs, to put them back
// after a pass-through or off run, and loads the pass-through program.
func newHooks(netns ns.NetNS, ifs []string) (*hooks, error) {
	h := &hooks{netns: netns, ifs: ifs, lockstep: make(map[uint32]hookProg)}
	err := netns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifs[0])
		if err != nil {
			return err
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			filters, err := netlink.FilterList(link, parent)
			if err != nil {
				return err
			}
			for _, f := range filters {
				bf, ok := f.(*netlink.BpfFilter)
				if !ok || !strings.HasPrefix(bf.Name, "lockstep_") {
					continue
				}
				prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(bf.Id))
				if err != nil {
					return fmt.Errorf("open program %d: %w", bf.Id, err)
				}
				h.lockstep[parent] = hookProg{prog, bf.Name}
			}
		}
		return nil
	})
	if err == nil && len(h.lockstep) != 2 {
		err = fmt.Errorf("found %d of lockstep's 2 filters", len(h.lockstep))
	}
	if err == nil {
		h.pass, err = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "pass", Type: ebpf.SchedCLS, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}, // TC_ACT_OK
		})
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("read lockstep's tc filters on %s: %w", ifs[0], err)
	}
	return h, nil
}

// set puts every host veth in mode: its clsact qdisc removed (off), or
// present with the mode's program on both hooks, where lockstep attaches
// its own (same parent, priority, handle and protocol).
func (h *hooks) set(mode string) error {
	return h.netns.Do(func(ns.NetNS) error {
		for _, ifname := range h.ifs {
			link, err := netlink.LinkByName(ifname)
			if err != nil {
				return fmt.Errorf("set %s: %w", ifname, err)
			}
			qdisc := &netlink.GenericQdisc{
				QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
				QdiscType:  "clsact",
			}
			if mode == modeOff {
				if err := netlink.QdiscDel(qdisc); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("remove the clsact qdisc of %s: %w", ifname, err)
				}
				continue
			}
			if err := netlink.QdiscAdd(qdisc); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add a clsact qdisc to %s: %w", ifname, err)
			}
			for parent, hp := range h.lockstep {
				if mode == modePass {
					hp = hookProg{h.pass, "policybench_pass"}
				}
				filter := &netlink.BpfFilter{
					FilterAttrs: netlink.FilterAttrs{
						LinkIndex: link.Attrs().Index, Parent: parent, Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL,
					},
					Fd: hp.prog.FD(), Name: hp.name, DirectAction: true,
				}
				if err := netlink.FilterReplace(filter); err != nil {
					return fmt.Errorf("attach %s to %s: %w", hp.name, ifname, err)
				}
			}
		}
		return nil
	})
}

// close releases the programs (the filters keep what they use).
func (h *hooks) close() error {
	for _, hp := range h.lockstep {
		hp.prog.Close()
	}
	if h.pass != nil {
		h.pass.Close()
	}
	return nil
}

// addPod creates a pod netns and ADDs it through libcni and lockstep-cni,
// with the Kubernetes CNI_ARGS that tie it to its manifest.
func (b *bench) addPod(ctx context.Context, node *nodesim.Node, name string) (*iperfPod, error) {
	n, err := b.newNetns()
	if err != nil {
		return nil, err
	}
	rt := nodesim.Runtime("policybench-"+name, n, "eth0", "bench", name)
	raw, err := node.Add(ctx, rt)
	if err != nil {
		return nil, fmt.Errorf("ADD %s: %w", name, err)
	}
	b.onCleanup(func() error {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return node.Del(dctx, rt)
	})
	res, err := types100.GetResult(raw)
	if err != nil {
		return nil, err
	}
	p := &iperfPod{name: name, hostIf: api.HostIfName(rt.ContainerID, "eth0"), netns: filepath.Base(n.Path())}
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && a.Unmap().Is4() {
			p.addr = a.Unmap()
		}
	}
	if !p.addr.IsValid() {
		return nil, fmt.Errorf("ADD %s: no IPv4 address in the result", name)
	}
	return p, nil
}

// iperf runs one iperf3 client from client to server for seconds and returns the rate
// the server received. The first attempts may find the server not yet
// listening.
func (b *bench) iperf(ctx context.Context, client, server *iperfPod, seconds int) (float64, error) {
	var lastErr error
	for range 20 {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", client.netns}, b.pinned(clientCPU, "iperf3", "-c", server.addr.String(),
			"-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(seconds), "-J")...)...)
		out, err := cmd.Output()
		bps, perr := parseIperf(out)
		if err == nil && perr == nil {
			return bps, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		lastErr = errors.Join(perr, err)
		time.Sleep(250 * time.Millisecond)
	}
	return 0, lastErr
}

// iperfReport is the part of iperf3 -J output policybench reads.
type iperfReport struct {
	End struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// parseIperf returns the received rate of an iperf3 -J client report.
func parseIperf(out []byte) (float64, error) {
	var r iperfReport
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("read iperf3 -J output: %w", err)
	}
	if r.Error != "" {
		return 0, errors.New("iperf3: " + r.Error)
	}
	if r.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3 reported no received data")
	}
	return r.End.SumReceived.BitsPerSecond, nil
}

// median returns the median of v (the mean of the middle two for an even
// count), or 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
