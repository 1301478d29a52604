//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
)

// Who translates the client's connections to the ClusterIP in a round,
// and who forwards the pods' packets between the nodes.
const (
	// modeLockstep: the eBPF dataplane translates, before policy, and
	// routes (service-translation and host-routing true, the defaults).
	modeLockstep = "lockstep"
	// modeKubeProxy: kube-proxy's DNAT in the client node's netfilter
	// translates (service-translation false); lockstep still routes what
	// is addressed to a pod, so the backend node's side of every
	// connection skips its stack as with modeLockstep.
	modeKubeProxy = "kube-proxy"
	// modeKernel: kube-proxy translates and both nodes' stacks forward
	// every packet (host-routing false too): a node with kube-proxy whose
	// pod network routes through the kernel.
	modeKernel = "kube-proxy, kernel routing"
)

// modes are the modes measured, in the order they take turns.
var modes = []string{modeLockstep, modeKubeProxy, modeKernel}

// modeConfig is the lockstep-config of mode.
func modeConfig(mode string) map[string]string {
	return map[string]string{
		"service-translation": strconv.FormatBool(mode == modeLockstep),
		"host-routing":        strconv.FormatBool(mode != modeKernel),
	}
}

// roundOrder is the order of the modes in round r (r ≥ 1): each round
// starts in the mode the previous one ended in, so a round switches
// twice and the modes take turns going first (equally often when the
// rounds are a multiple of len(modes)).
func roundOrder(r int) []string {
	start := (len(modes) - (r-1)%len(modes)) % len(modes)
	out := make([]string, 0, len(modes))
	for i := range modes {
		out = append(out, modes[(start+i)%len(modes)])
	}
	return out
}

// The nodes: the clients run on one, every backend on the other, so that
// every connection crosses from node to node as most do.
const (
	clientNode  = "e2e-node-1"
	backendNode = "e2e-node-2"
)

// benchNS is the namespace of the benchmark's pods and Services.
const benchNS = "svcbench"

// connImage is the image of tools/svcbench/connrate.
const connImage = "lockstep-svcbench-connrate:dev"

// backendCounts are the Services measured: the ClusterIP of one backend
// and of 100. 0 is the reference without a Service: the first backend's
// pod IP.
var backendCounts = []int{1, 100}

// Source ports of each client pod: the warm-up's, then the measurement's.
// No connection of a pod reuses a port (see connrate's doc), so a
// measurement ends early once it has made 7000 connections. The bound is
// the eBPF dataplane's conntrack share (bpfmaps.CTShare, 16384 entries
// per endpoint and direction): a translated connection holds two entries
// until its RST's timeout and the agent's next reclaim, so a pod that
// opened more at once would be refused new connections whenever the
// node's tables are under pressure (as back-to-back measurements can put
// them), and the run would measure the share, not the translation. 8000
// connections of a pod hold 16000 entries at most.
const (
	warmupPorts  = "1024-1999"
	measurePorts = "2000-8999"
)

// connSample is one measurement: a fresh client pod opening and closing
// connections for the configured time.
type connSample struct {
	round    int
	mode     string // one of modes; "" for the pod IP
	backends int    // 0: the pod IP, no Service
	rate     float64
	conns    uint64
	failures uint64
	// kubeProxyNAT is how many new connections kube-proxy's rule for the
	// ClusterIP translated meanwhile (its packet counter on the client's
	// node): every one with kube-proxy translating, none with modeLockstep.
	kubeProxyNAT uint64
	// connectP50 and connectP99 are connect's latency, in microseconds.
	connectP50, connectP99 float64
	load                   string // the 1-minute load average when it started
}

// connResult is the connection-rate benchmark's outcome.
type connResult struct {
	seconds, workers, rounds int
	samples                  []connSample
}

// connOutput is what `connrate connect` prints.
type connOutput struct {
	Connections    uint64  `json:"connections"`
	Failures       uint64  `json:"failures"`
	Seconds        float64 `json:"seconds"`
	PerSecond      float64 `json:"perSecond"`
	ConnectP50     float64 `json:"connectP50Micros"`
	ConnectP99     float64 `json:"connectP99Micros"`
	PortsExhausted bool    `json:"portsExhausted"`
	FirstFailure   string  `json:"firstFailure"`
}

// connBench is the cluster and what the rounds need of it.
type connBench struct {
	cfg       config
	c         *realnode.Cluster
	client    realnode.Host
	backend   realnode.Host
	clusterIP map[int]string // backend count → the Service's ClusterIP
	podIP     string         // the first backend's
	pods      int            // client pods created so far
}

// benchConnRate brings up the real-node cluster with lockstep (eBPF),
// deploys the backends, the Services and the client image, measures the
// connection rate in interleaved rounds of the modes and takes the
// cluster down.
func benchConnRate(ctx context.Context, cfg config) (*connResult, error) {
	repo, err := realnode.RepoRoot()
	if err != nil {
		return nil, err
	}
	kubeBin, err := kubetest.BinDir(ctx, logf)
	if err != nil {
		return nil, err
	}
	initBin := filepath.Join(repo, "bin", "e2e")
	if err := goBuild(ctx, repo, initBin, "./tools/e2e"); err != nil {
		return nil, err
	}
	images, err := realnode.BuildImages(ctx, realnode.ImageOptions{Repo: repo, KubeBinDir: kubeBin, Logf: logf})
	if err != nil {
		return nil, err
	}
	img, err := buildConnImage(ctx, repo)
	if err != nil {
		return nil, err
	}
	c, err := realnode.Up(ctx, realnode.Options{Name: realnode.NameFromEnv(), KubeBinDir: kubeBin, InitBinary: initBin,
		Images: append(images, img), Logf: logf})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := realnode.Down(c.Name, c.Dir, logf); err != nil {
			logf("take the cluster down: %v", err)
		}
	}()
	if err := c.InstallLockstep(ctx, repo, "ebpf"); err != nil {
		return nil, err
	}
	b := &connBench{cfg: cfg, c: c, clusterIP: map[int]string{}}
	if b.client, err = c.Node(clientNode); err != nil {
		return nil, err
	}
	if b.backend, err = c.Node(backendNode); err != nil {
		return nil, err
	}
	if err := b.deploy(ctx); err != nil {
		return nil, err
	}
	res := &connResult{seconds: cfg.seconds, workers: cfg.workers, rounds: cfg.rounds}
	// An unmeasured round first, in the mode the cluster starts in: the
	// first connections of a node pay for warming its caches. Then the
	// modes take turns (roundOrder).
	mode := modeLockstep
	if err := b.setMode(ctx, mode); err != nil {
		return nil, err
	}
	for r := 0; r <= cfg.rounds; r++ {
		order := []string{modeLockstep}
		if r > 0 {
			order = roundOrder(r)
		}
		s, err := b.sample(ctx, r, "", 0)
		if err != nil {
			return nil, err
		}
		if r > 0 {
			res.samples = append(res.samples, s)
		}
		for _, m := range order {
			if m != mode {
				if err := b.setMode(ctx, m); err != nil {
					return nil, err
				}
				mode = m
			}
			counts := backendCounts
			if r%2 == 1 {
				counts = []int{backendCounts[1], backendCounts[0]}
			}
			for _, n := range counts {
				s, err := b.sample(ctx, r, m, n)
				if err != nil {
					return nil, err
				}
				if r > 0 {
					res.samples = append(res.samples, s)
				}
			}
		}
	}
	return res, nil
}

// goBuild builds pkg of the repository into out, static.
func goBuild(ctx context.Context, repo, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// buildConnImage builds tools/svcbench/connrate and wraps it into the
// image connImage (tools/image binary), beside realnode's images.
func buildConnImage(ctx context.Context, repo string) (string, error) {
	dir := filepath.Join(repo, "bin", "e2e-images")
	bin := filepath.Join(dir, "connrate")
	if err := goBuild(ctx, repo, bin, "./tools/svcbench/connrate"); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "connrate.tar")
	name, tag, _ := strings.Cut(connImage, ":")
	cmd := exec.CommandContext(ctx, "go", "run", "./tools/image", "binary", "-bin", bin, "-name", name, "-tag", tag,
		"-path", "/connrate", "-out", out)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the connrate image: %w\n%s", err, b)
	}
	return out, nil
}

// deploy creates the backends (100 pods of connrate serve on the backend
// node), the two Services and waits until their EndpointSlices list every
// backend ready.
func (b *connBench) deploy(ctx context.Context) error {
	logf("deploying %d backends on %s and the Services", backendCounts[1], backendNode)
	var docs []string
	docs = append(docs, manifest(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": benchNS}}))
	for i := range backendCounts[1] {
		labels := map[string]string{"app": "backend"}
		if i == 0 {
			labels["first"] = "yes"
		}
		docs = append(docs, podManifest(fmt.Sprintf("backend-%03d", i), backendNode, labels, "serve", "-listen", ":8080"))
	}
	for _, n := range backendCounts {
		sel := map[string]string{"app": "backend"}
		if n == 1 {
			sel["first"] = "yes"
		}
		docs = append(docs, manifest(map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": serviceName(n), "namespace": benchNS},
			"spec": map[string]any{
				"selector": sel,
				"ports":    []any{map[string]any{"port": 80, "targetPort": 8080, "protocol": "TCP"}},
			},
		}))
	}
	if _, err := b.c.KubectlIn(ctx, strings.Join(docs, "\n---\n"), "apply", "-f", "-"); err != nil {
		return err
	}
	if _, err := b.c.Kubectl(ctx, "-n", benchNS, "wait", "--for=condition=Ready", "pod", "-l", "app=backend", "--timeout=10m"); err != nil {
		return err
	}
	for _, n := range backendCounts {
		if err := b.waitEndpoints(ctx, serviceName(n), n); err != nil {
			return err
		}
		out, err := b.c.Kubectl(ctx, "-n", benchNS, "get", "service", serviceName(n), "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			return err
		}
		b.clusterIP[n] = strings.TrimSpace(string(out))
	}
	out, err := b.c.Kubectl(ctx, "-n", benchNS, "get", "pod", "backend-000", "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return err
	}
	b.podIP = strings.TrimSpace(string(out))
	logf("  Services: 1 backend at %s, %d at %s; the first backend at %s", b.clusterIP[1], backendCounts[1], b.clusterIP[backendCounts[1]], b.podIP)
	return nil
}

func serviceName(backends int) string { return fmt.Sprintf("backends-%d", backends) }

// waitEndpoints waits until the EndpointSlices of svc list n ready
// endpoints.
func (b *connBench) waitEndpoints(ctx context.Context, svc string, n int) error {
	return realnode.Poll(ctx, 5*time.Minute, time.Second, fmt.Sprintf("%d ready endpoints of %s", n, svc), func() (bool, string, error) {
		var list struct {
			Items []struct {
				Endpoints []struct {
					Conditions struct {
						Ready *bool `json:"ready"`
					} `json:"conditions"`
				} `json:"endpoints"`
			} `json:"items"`
		}
		if err := b.c.GetJSON(ctx, &list, "endpointslices", "-n", benchNS, "-l", "kubernetes.io/service-name="+svc); err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for _, it := range list.Items {
			for _, e := range it.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == n, fmt.Sprintf("%d ready", ready), nil
	})
}

// setMode configures mode as a user does: lockstep-config's keys
// (modeConfig) and a restart of the agents; then waits until the client
// node's agent reports the translation and, on both nodes, host routing
// (its uplinks) as the mode has them.
func (b *connBench) setMode(ctx context.Context, mode string) error {
	cfg := modeConfig(mode)
	logf("switching to %s (service-translation: %s, host-routing: %s)", mode, cfg["service-translation"], cfg["host-routing"])
	if err := b.c.SetConfig(ctx, cfg); err != nil {
		return err
	}
	for _, node := range []realnode.Host{b.client, b.backend} {
		err := realnode.Poll(ctx, 2*time.Minute, time.Second, "the agent on "+node.Name+" to apply the mode", func() (bool, string, error) {
			st, err := b.dataplaneStatus(ctx, node)
			if err != nil {
				return false, err.Error(), nil
			}
			if routing := st.Counts[uplinksCount] > 0; routing != (mode != modeKernel) {
				return false, fmt.Sprintf("%d uplinks", st.Counts[uplinksCount]), nil
			}
			if node.Name != clientNode {
				return true, "", nil
			}
			s := st.Services
			if s.LeftToKubeProxy != (mode != modeLockstep) || s.Frontends < len(backendCounts) {
				return false, fmt.Sprintf("%d frontends, left to kube-proxy %t", s.Frontends, s.LeftToKubeProxy), nil
			}
			return true, "", nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// uplinksCount is the dataplane count, in `lockstep status`, of the
// uplinks host routing is attached to: bpfmaps.UplinksMap's entries.
const uplinksCount = "map " + bpfmaps.UplinksMap

// dataplaneStatus is the dataplane part of node's `lockstep status`; an
// agent that has applied nothing yet is an error.
func (b *connBench) dataplaneStatus(ctx context.Context, node realnode.Host) (*api.DataplaneStatus, error) {
	st, err := b.c.AgentStatus(ctx, node)
	if err != nil {
		return nil, err
	}
	if d := st.Dataplane; d == nil || d.Services == nil || d.LastApply.IsZero() {
		return nil, errors.New("no dataplane state applied yet")
	}
	return st.Dataplane, nil
}

// sample measures one mode and Service (backends 0: the pod IP) from a
// fresh client pod: a one-second warm-up, then the measurement, with
// kube-proxy's translations counted around it.
func (b *connBench) sample(ctx context.Context, round int, mode string, backends int) (connSample, error) {
	s := connSample{round: round, mode: mode, backends: backends, load: strings.Fields(benchkit.LoadAverage())[0]}
	b.pods++
	pod := fmt.Sprintf("client-%d", b.pods)
	if _, err := b.c.KubectlIn(ctx, podManifest(pod, clientNode, map[string]string{"app": "client"}, "wait"), "apply", "-f", "-"); err != nil {
		return s, err
	}
	if _, err := b.c.Kubectl(ctx, "-n", benchNS, "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=3m"); err != nil {
		return s, err
	}
	addr := b.podIP + ":8080"
	if backends > 0 {
		addr = b.clusterIP[backends] + ":80"
	}
	if _, err := b.connect(ctx, pod, addr, time.Second, warmupPorts); err != nil {
		return s, fmt.Errorf("warm up: %w", err)
	}
	var before uint64
	if backends > 0 {
		var err error
		if before, err = b.kubeProxyNAT(ctx, b.clusterIP[backends]); err != nil {
			return s, err
		}
	}
	out, err := b.connect(ctx, pod, addr, time.Duration(b.cfg.seconds)*time.Second, measurePorts)
	if err != nil {
		return s, err
	}
	s.rate, s.conns, s.failures = out.PerSecond, out.Connections, out.Failures
	s.connectP50, s.connectP99 = out.ConnectP50, out.ConnectP99
	what := "pod IP"
	if backends > 0 {
		after, err := b.kubeProxyNAT(ctx, b.clusterIP[backends])
		if err != nil {
			return s, err
		}
		s.kubeProxyNAT = after - before
		what = fmt.Sprintf("%s, %d backends", mode, backends)
		if err := s.check(); err != nil {
			return s, err
		}
	}
	label := "round " + strconv.Itoa(round)
	if round == 0 {
		label = "warm-up"
	}
	logf("  %s %-24s %7.0f connections/s (%d, %d failed; connect p50 %.0f µs, p99 %.0f µs; kube-proxy translated %d; load %s)",
		label, what, s.rate, s.conns, s.failures, s.connectP50, s.connectP99, s.kubeProxyNAT, s.load)
	if s.failures*100 > s.conns {
		return s, fmt.Errorf("%s: %d of %d connections failed (first: %s)", what, s.failures, s.conns+s.failures, out.FirstFailure)
	}
	return s, nil
}

// check fails a sample whose connections were not translated by the
// mode it measured: kube-proxy's rule must have translated every one of
// them when kube-proxy translates, none with modeLockstep.
func (s connSample) check() error {
	switch {
	case (s.mode == modeKubeProxy || s.mode == modeKernel) && s.kubeProxyNAT < s.conns:
		return fmt.Errorf("%s round %d, %d backends: kube-proxy translated %d of %d connections; lockstep translated the others", s.mode, s.round, s.backends, s.kubeProxyNAT, s.conns)
	case s.mode == modeLockstep && s.kubeProxyNAT > 0:
		return fmt.Errorf("%s round %d, %d backends: kube-proxy translated %d of %d connections that lockstep should have", s.mode, s.round, s.backends, s.kubeProxyNAT, s.conns)
	}
	return nil
}

// connect runs `connrate connect` in the client pod.
func (b *connBench) connect(ctx context.Context, pod, addr string, d time.Duration, ports string) (connOutput, error) {
	var out connOutput
	raw, err := b.c.Kubectl(ctx, "-n", benchNS, "exec", pod, "--", "/connrate", "connect", "-addr", addr,
		"-duration", d.String(), "-workers", strconv.Itoa(b.cfg.workers), "-ports", ports)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("read connrate's result %q: %w", raw, err)
	}
	return out, nil
}

// kubeProxyNAT reads the packet counter of kube-proxy's rule that sends
// new connections to clusterIP to its Service chain, in the client node's
// nat table: the connections kube-proxy translated.
func (b *connBench) kubeProxyNAT(ctx context.Context, clusterIP string) (uint64, error) {
	out, err := b.c.Exec(ctx, b.client, "iptables-save", "-c", "-t", "nat")
	if err != nil {
		return 0, err
	}
	n, ok := parseServiceCounter(string(out), clusterIP)
	if !ok {
		return 0, fmt.Errorf("no rule of kube-proxy's for %s in %s's nat table (iptables-save -c -t nat)", clusterIP, b.client.Name)
	}
	return n, nil
}

// parseServiceCounter finds, in iptables-save -c output, the KUBE-SERVICES
// rule for clusterIP that jumps to a KUBE-SVC- chain and returns its
// packet counter, e.g. from
//
//	[12:720] -A KUBE-SERVICES -d 10.96.12.34/32 -p tcp -m comment --comment "svcbench/backends-1 cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABCDEF
func parseServiceCounter(save, clusterIP string) (uint64, bool) {
	for _, line := range strings.Split(save, "\n") {
		counter, rule, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(counter, "[") || !strings.HasPrefix(rule, "-A KUBE-SERVICES ") ||
			!strings.Contains(rule, " -d "+clusterIP+"/32 ") || !strings.Contains(rule, " -j KUBE-SVC-") {
			continue
		}
		pkts, _, ok := strings.Cut(strings.Trim(counter, "[]"), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(pkts, 10, 64)
		if err != nil {
			continue
		}
		return n, true
	}
	return 0, false
}

// podManifest is a pod of the connrate image on node running args.
func podManifest(name, node string, labels map[string]string, args ...string) string {
	return manifest(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": benchNS, "labels": labels},
		"spec": map[string]any{
			"nodeSelector":                  map[string]string{"kubernetes.io/hostname": node},
			"terminationGracePeriodSeconds": 0,
			"containers": []any{map[string]any{
				"name": "connrate", "image": connImage, "imagePullPolicy": "IfNotPresent",
				"command": []string{"/connrate"}, "args": args,
			}},
		},
	})
}

func manifest(v map[string]any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
