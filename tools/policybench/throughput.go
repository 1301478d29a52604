//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/internal/nodesim"
)

// iperfPort is iperf3's default port, the one the policy allows.
const iperfPort = 5201

// throughputResult is iperf3's received rate, per round, with lockstep's
// filters attached ("on") and removed ("off").
type throughputResult struct {
	on, off []float64 // bits per second
}

// iperfPod is a pod of the throughput node.
type iperfPod struct {
	name, hostIf, netns string
	addr                netip.Addr
}

// throughputManifests are the objects of the throughput node: a client and
// a server pod, and a policy that isolates the server and allows the
// client to reach it on TCP 5201 only.
func throughputManifests() *cluster {
	tcp := policy.TCP
	pod := func(name string) *policy.Pod {
		return &policy.Pod{
			TypeMeta:   policy.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: policy.ObjectMeta{Namespace: "bench", Name: name, Labels: map[string]string{"app": name}},
		}
	}
	return &cluster{
		Namespaces: []*policy.Namespace{{
			TypeMeta:   policy.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: policy.ObjectMeta{Name: "bench"},
		}},
		Pods: []*policy.Pod{pod("client"), pod("server")},
		Policies: []*policy.NetworkPolicy{{
			TypeMeta:   policy.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: policy.ObjectMeta{Namespace: "bench", Name: "allow-client"},
			Spec: policy.NetworkPolicySpec{
				PodSelector: policy.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				Ingress: []policy.IngressRule{{
					Ports: []policy.NetworkPolicyPort{{Protocol: &tcp, Port: policy.FromInt(iperfPort)}},
					From:  []policy.NetworkPolicyPeer{{PodSelector: &policy.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				}},
				PolicyTypes: []policy.PolicyType{policy.PolicyTypeIngress},
			},
		}},
	}
}

// benchThroughput runs iperf3 between two pods added through the real CNI
// plugin, first as lockstep enforces the policy, then with its filters
// removed from both host veths.
func (b *bench) benchThroughput(ctx context.Context) (*throughputResult, error) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, fmt.Errorf("find iperf3: %w (make deps installs it)", err)
	}
	dir := filepath.Join(b.work, "iperf-manifests")
	if err := writeManifests(dir, throughputManifests()); err != nil {
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

	srv := exec.Command("ip", "netns", "exec", server.netns, "iperf3", "-s", "-B", server.addr.String())
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start iperf3 server: %w", err)
	}
	b.onCleanup(func() error {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		return nil
	})

	res := &throughputResult{}
	for _, mode := range []string{"on", "off"} {
		if mode == "off" {
			for _, p := range pods {
				if out, err := exec.Command("ip", "netns", "exec", filepath.Base(node.NS.Path()),
					"tc", "qdisc", "del", "dev", p.hostIf, "clsact").CombinedOutput(); err != nil {
					return nil, fmt.Errorf("remove lockstep's filters from %s: %w: %s", p.hostIf, err, bytes.TrimSpace(out))
				}
			}
		}
		for round := range b.cfg.iperfRounds {
			bps, err := b.iperf(ctx, client, server)
			if err != nil {
				return nil, fmt.Errorf("policy %s, round %d: %w", mode, round+1, err)
			}
			logf("  policy %s, round %d: %.2f Gbit/s", mode, round+1, bps/1e9)
			if mode == "on" {
				res.on = append(res.on, bps)
			} else {
				res.off = append(res.off, bps)
			}
		}
	}
	return res, nil
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

// iperf runs one iperf3 client from client to server and returns the rate
// the server received. The first attempts may find the server not yet
// listening.
func (b *bench) iperf(ctx context.Context, client, server *iperfPod) (float64, error) {
	var lastErr error
	for range 20 {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", client.netns, "iperf3", "-c", server.addr.String(),
			"-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(b.cfg.iperfSeconds), "-J")
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
