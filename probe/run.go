//go:build linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
)

// Defaults for Config.
const (
	DefaultPool    = "10.244.0.0/16"
	DefaultTimeout = time.Second
	DefaultWorkers = 64
	// DefaultPool6 is the IPv6 pool added to Pools when a probe over IPv6
	// names none.
	DefaultPool6 = "fd00:10:244::/112"
)

// Config describes one probe run.
type Config struct {
	// Binary is the lockstep binary; it runs the agent and, linked as
	// lockstep-cni, the CNI plugin.
	Binary string
	// Manifests is the directory passed to the agent's --manifests, so it
	// enforces the policies found there. Empty starts the agent without it.
	Manifests string
	// Pods are created and probed. Usually read from the same directory.
	Pods []Pod
	// Services are probed through their ClusterIPs of Family (Via
	// ViaService or ViaBoth). Usually read from the same directory; the
	// agent computes their backends from the manifests.
	Services []Service
	// Via is how destinations are reached: ViaPodIP, ViaService or
	// ViaBoth. Empty means ViaBoth when there are Services, else ViaPodIP.
	Via string
	// Attempts is how many connections a probe through a Service makes at
	// most (default DefaultAttempts).
	Attempts int
	// Pools are the agent's --pool-cidr values (default DefaultPool, and
	// DefaultPool6 with Family IPv6 when they include no IPv6 pool).
	Pools []string
	// Family is the IP family every probe connects over, IPv4 (the
	// default) or IPv6 (case does not matter; "4" and "6" do too); every
	// pod must have an address of it.
	Family string
	// Dataplane is the agent's --dataplane (empty: the agent's default,
	// eBPF).
	Dataplane string
	// Timeout bounds each connection attempt (default DefaultTimeout).
	Timeout time.Duration
	// Workers bounds the connection attempts in flight (default
	// DefaultWorkers).
	Workers int
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Then, when set, runs after the first probe while the node and pods
	// still exist: it may edit the manifests (the agent follows edits) and
	// call reprobe to probe every pair again. Its error is Run's.
	Then func(ctx context.Context, first *Report, reprobe func(context.Context) (*Report, error)) error
}

// pod is a created pod: its namespace, address and listeners.
type pod struct {
	Pod
	netns     ns.NetNS
	addr      netip.Addr
	listeners map[Port]error // nil error: listening
}

// Run creates a node with an agent and the pods, probes every ordered pair
// of distinct pods on every port the destination declares, and every
// frontend of every Service from every pod, as cfg.Via says, and removes
// everything before it returns, also on error and when ctx is cancelled.
// It must run as root.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	cfg, err = withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, format+"\n", args...) }
	if err := validate(cfg); err != nil {
		return nil, err
	}
	start := time.Now()
	if n, err := SweepStale(); err != nil {
		progress("warning: sweep leftovers of earlier probes: %v", err)
	} else if n > 0 {
		progress("removed %d leftovers of an interrupted probe", n)
	}

	flags, err := detectAgentFlags(ctx, cfg.Binary)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", nodesim.RunDirPattern(NSPrefix))
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	var cleanup []func() error
	defer func() {
		// Runs on success, error and cancellation alike, newest first.
		var errs []error
		for i := len(cleanup) - 1; i >= 0; i-- {
			errs = append(errs, cleanup[i]())
		}
		errs = append(errs, os.RemoveAll(work))
		if cerr := errors.Join(errs...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()

	bin := filepath.Join(work, "bin")
	if err := binDir(bin, cfg.Binary); err != nil {
		return nil, err
	}
	args := []string{"--standalone", "--metrics-addr", ""}
	for _, p := range cfg.Pools {
		args = append(args, "--pool-cidr", p)
	}
	if cfg.Manifests != "" {
		if flags.manifests {
			args = append(args, "--manifests", cfg.Manifests)
		} else {
			progress("warning: this agent has no --manifests flag: policies are NOT enforced, every probe should be allowed")
		}
	}
	if cfg.Dataplane != "" {
		if !flags.dataplane {
			return nil, fmt.Errorf("probe with dataplane %s: this lockstep binary has no agent --dataplane flag", cfg.Dataplane)
		}
		args = append(args, "--dataplane", cfg.Dataplane)
	}
	// The node comes with its own bpffs mount, removed by node.Close.
	node, err := nodesim.NewNode(nodesim.NodeOptions{Prefix: NSPrefix, BinDir: bin, Pools: cfg.Pools, WorkDir: filepath.Join(work, "node")})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, node.Close)
	if cfg.Via != ViaPodIP {
		if err := routeOut(node, &cleanup); err != nil {
			return nil, err
		}
		if err := unlimitICMP(node); err != nil {
			return nil, err
		}
	}
	args = append(args, "--state-dir", node.StateDir, "--socket", node.Socket)
	if flags.bpfRoot {
		args = append(args, "--bpf-root", node.BPFRoot)
	}
	progress("starting the agent in node namespace %s", filepath.Base(node.NS.Path()))
	agent, err := startAgent(ctx, node, cfg.Binary, args)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() error { agent.stop(); return nil })

	progress("creating %d pods…", len(cfg.Pods))
	pods, err := createPods(ctx, node, cfg.Pods, cfg.Family == IPv6, &cleanup)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if want := p.WantIPs[familyIndex(p.addr)]; want.IsValid() && want != p.addr {
			progress("warning: pod %s pins %s with %s but got %s", p.Key(), want, IPAnnotation, p.addr)
		}
	}
	cleanup = append(cleanup, openListeners(pods))
	warmNeighbours(node, pods, progress)

	frontends, svcInfos := serviceFrontends(cfg.Services, cfg.Family, progress)
	// No settling: the agent answers a CNI ADD only once the whole
	// committed state, every pod created so far included, is in force.
	probeAll := func(ctx context.Context) (*Report, error) {
		rep := &Report{Via: cfg.Via, Results: []Result{}}
		if cfg.Via != ViaService {
			jobs := plan(pods)
			progress("probing %d connections…", len(jobs))
			probeStart := time.Now()
			rep.Results = runProbes(ctx, jobs, cfg.Workers, cfg.Timeout)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			allowed, denied, unknown := rep.Counts()
			progress("probed in %s (%s in all): %d allowed, %d denied, %d unprobeable",
				time.Since(probeStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), allowed, denied, unknown)
		}
		if cfg.Via != ViaPodIP {
			jobs := planServices(pods, frontends)
			progress("probing %d frontends through Services, up to %d connections each…", len(jobs), cfg.Attempts)
			probeStart := time.Now()
			rep.Services = svcInfos
			rep.ServiceResults = runServiceProbes(ctx, jobs, cfg.Workers, cfg.Attempts, cfg.Timeout)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			progress("probed through Services in %s (%s in all): %s",
				time.Since(probeStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), describeCounts(rep.ServiceCounts()))
		}
		if err := agent.exited(); err != nil {
			return nil, err
		}
		for _, p := range pods {
			rep.Pods = append(rep.Pods, PodInfo{Namespace: p.Namespace, Name: p.Name, IP: p.addr.String(), Ports: p.Ports})
		}
		rep.Sort()
		return rep, nil
	}
	if rep, err = probeAll(ctx); err != nil {
		return nil, err
	}
	if cfg.Then != nil {
		if err := cfg.Then(ctx, rep, probeAll); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func withDefaults(cfg Config) (Config, error) {
	if len(cfg.Pools) == 0 {
		cfg.Pools = []string{DefaultPool}
	}
	switch strings.ToLower(cfg.Family) {
	case "", "ipv4", "4":
		cfg.Family = IPv4
	case "ipv6", "6":
		cfg.Family = IPv6
		has6 := false
		for _, p := range cfg.Pools {
			pfx, err := netip.ParsePrefix(p)
			has6 = has6 || (err == nil && pfx.Addr().Is6())
		}
		if !has6 {
			cfg.Pools = append(slices.Clone(cfg.Pools), DefaultPool6)
		}
	default:
		return cfg, fmt.Errorf("probe over IP family %q: want %s or %s", cfg.Family, IPv4, IPv6)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	switch cfg.Via {
	case "":
		cfg.Via = ViaPodIP
		if len(cfg.Services) > 0 {
			cfg.Via = ViaBoth
		}
	case ViaPodIP, ViaService, ViaBoth:
	default:
		return cfg, fmt.Errorf("probe via %q: want %s, %s or %s", cfg.Via, ViaPodIP, ViaService, ViaBoth)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	pods := make([]Pod, len(cfg.Pods))
	for i, p := range cfg.Pods {
		p.Ports = normalisePorts(p.Ports)
		if p.UID == "" {
			p.UID = "probe-" + p.Namespace + "-" + p.Name
		}
		pods[i] = p
	}
	cfg.Pods = pods
	return cfg, nil
}

func validate(cfg Config) error {
	pods := cfg.Pods
	if cfg.Via != ViaPodIP && len(cfg.Services) == 0 {
		return fmt.Errorf("probe via %s: no Services to probe (the manifests declare none with a ClusterIP)", cfg.Via)
	}
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Namespace == "" || p.Name == "" {
			return fmt.Errorf("pod %q: namespace and name are required", p.Key())
		}
		if seen[p.Key()] {
			return fmt.Errorf("pod %s is declared twice", p.Key())
		}
		seen[p.Key()] = true
	}
	switch {
	case cfg.Via != ViaService && len(pods) < 2:
		return fmt.Errorf("found %d pods: a probe between pods needs at least two", len(pods))
	case len(pods) == 0:
		return errors.New("found no pods: a probe through Services needs a pod to connect from")
	}
	svcs := make(map[string]bool, len(cfg.Services))
	for _, s := range cfg.Services {
		if svcs[s.Key()] {
			return fmt.Errorf("service %s is declared twice", s.Key())
		}
		svcs[s.Key()] = true
	}
	return nil
}

// createPods creates a namespace per pod and runs CNI ADD for it, a few at
// a time, as a kubelet starting pods would; each pod is probed at its
// address of the family v6 says. Each namespace is added to cleanup as
// soon as it exists.
func createPods(ctx context.Context, node *nodesim.Node, specs []Pod, v6 bool, cleanup *[]func() error) ([]*pod, error) {
	pods := make([]*pod, len(specs))
	for i, spec := range specs {
		n, err := nodesim.Create(nodesim.Name(NSPrefix))
		if err != nil {
			return nil, err
		}
		*cleanup = append(*cleanup, func() error { return nodesim.Delete(n) })
		pods[i] = &pod{Pod: spec, netns: n}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	sem := make(chan struct{}, 8)
	for i, p := range pods {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = addPod(ctx, node, i, p, v6)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pods, nil
}

func addPod(ctx context.Context, node *nodesim.Node, i int, p *pod, v6 bool) error {
	rt := &libcni.RuntimeConf{
		ContainerID: fmt.Sprintf("lsprobe%04d", i),
		NetNS:       p.netns.Path(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_UID", p.UID},
		},
	}
	r, err := node.Add(ctx, rt)
	if err != nil {
		return fmt.Errorf("create pod %s (CNI ADD): %w", p.Key(), err)
	}
	res, err := types100.GetResult(r)
	if err != nil {
		return fmt.Errorf("create pod %s: read CNI result: %w", p.Key(), err)
	}
	// Probe over the address of the family asked for.
	for _, ip := range res.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			continue
		}
		if a = a.Unmap(); a.Is6() == v6 && !p.addr.IsValid() {
			p.addr = a
		}
	}
	if !p.addr.IsValid() {
		family, hint := IPv4, ""
		if v6 {
			family, hint = IPv6, " (give the agent an IPv6 --pool-cidr)"
		}
		return fmt.Errorf("create pod %s: CNI result has no %s address%s", p.Key(), family, hint)
	}
	return nil
}

// openListeners opens every pod's listeners and returns the function that
// closes them. A listener that cannot be opened is recorded, and every
// probe to it reported as unprobeable.
func openListeners(pods []*pod) func() error {
	var closers []io.Closer
	for _, p := range pods {
		p.listeners = make(map[Port]error, len(p.Ports))
		for _, port := range p.Ports {
			c, err := listen(p.netns, port, p.Key())
			p.listeners[port] = err
			if err == nil {
				closers = append(closers, c)
			}
		}
	}
	return func() error {
		for _, c := range closers {
			c.Close()
		}
		return nil
	}
}

// warmNeighbours has the node resolve every pod's link-layer address
// before any probe starts. The first packet to a pod waits for it (ARP, or
// IPv6 neighbour discovery, whose solicitation is retransmitted after a
// second), which a loaded machine can stretch past a probe's timeout and
// report as a drop. The node's own packets to its pods pass any policy, so
// one ping each does it.
func warmNeighbours(node *nodesim.Node, pods []*pod, progress func(string, ...any)) {
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nodesim.Ping(node.NS, p.addr, 3*time.Second); err != nil {
				progress("warning: the node cannot ping pod %s at %s: %v", p.Key(), p.addr, err)
			}
		}()
	}
	wg.Wait()
}

// job is one probe to make.
type job struct {
	from, to *pod
	port     Port
}

// plan lists a probe for every ordered pair of distinct pods and every
// port the destination declares.
func plan(pods []*pod) []job {
	var jobs []job
	for _, from := range pods {
		for _, to := range pods {
			if from == to {
				continue
			}
			for _, port := range to.Ports {
				jobs = append(jobs, job{from: from, to: to, port: port})
			}
		}
	}
	return jobs
}

// runProbes makes the probes with at most workers in flight.
func runProbes(ctx context.Context, jobs []job, workers int, timeout time.Duration) []Result {
	results := make([]Result, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				results[i] = probeOne(ctx, jobs[i], timeout)
			}
		})
	}
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return results
}

func probeOne(ctx context.Context, j job, timeout time.Duration) Result {
	r := Result{From: j.from.Key(), To: j.to.Key(), Port: j.port.Port, Protocol: j.port.Protocol}
	if err := j.to.listeners[j.port]; err != nil {
		r.Error = err.Error()
		return r
	}
	v, err := dial(ctx, j.from.netns, netip.AddrPortFrom(j.to.addr, j.port.Port), j.port.Protocol, timeout)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Allowed = &v.Answered
	return r
}
