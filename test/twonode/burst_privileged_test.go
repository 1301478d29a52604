//go:build linux

package twonode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/testenv"
)

// The burst: burstPods pods on one node, burstParallel CNI ADDs at a
// time, from an IPPool of /burstBlockBits blocks with an operator that
// keeps burstMinFree addresses free on the node ahead of demand (a node
// that expects a burst of N pods is given a min-free of at least N).
const (
	burstPods      = 1000
	burstParallel  = 16
	burstBlockBits = 24
	burstMinFree   = 1024
	burstNamespace = "burst"
)

// BenchmarkKubePrivilegedPodBurst ADDs burstPods pods on one node through
// lockstep-cni, with the agent in Kubernetes mode, the operator and the
// API server running, as `make bench` reports it (tools/kubebench). Each
// iteration times the ADDs from the first start to the last return, checks
// every address is unique and inside the node's blocks, then times until
// the node's NodeIPAM status reports them all, and counts the write
// requests the API server served meanwhile (its own
// apiserver_request_total), by resource. Then it does the same for the
// allocations alone: burstPods ADD requests straight to the agent's
// socket, which is lockstep-cni's first step, without the plugin process
// or any wiring (metrics prefixed "ipam-"). The DELs, the aborts and the
// checks are not timed.
//
// The Pod objects exist, bound to the node, before the agent starts, as
// the scheduler would have made them; no kubelet writes their status here,
// so the writes counted are lockstep's (and the API server's own).
func BenchmarkKubePrivilegedPodBurst(b *testing.B) {
	testenv.Privileged(b)
	c := newClusterWithBlocks(b, burstBlockBits)
	n := &node{name: "node-burst", ip: netip.MustParsePrefix("192.168.78.1/24")}
	c.addNode(n)
	c.apply(fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, burstNamespace))
	c.createPods(n, burstPods)
	c.startOperator("--min-free", strconv.Itoa(burstMinFree))
	if err := n.sim.StartAgent(b.Context()); err != nil {
		b.Fatal(err)
	}
	waitFree(b, n, burstPods)

	netnses := make([]ns.NetNS, burstPods)
	for i := range netnses {
		netns, err := nodesim.Create(nodesim.Name(podPrefix))
		if err != nil {
			b.Fatal(err)
		}
		netnses[i] = netns
		b.Cleanup(func() { _ = nodesim.Delete(netns) })
	}

	var cni, ipam burstResult
	b.ResetTimer()
	for iter := range b.N {
		b.StopTimer()
		before := c.apiserverWrites()
		b.StartTimer()
		cni = c.burst(n, netnses, iter)
		b.StopTimer()
		cni.writes = c.apiserverWrites().minus(before)
		c.delAll(n, netnses, iter)

		before = c.apiserverWrites()
		b.StartTimer()
		var pending []api.OpRequest
		ipam, pending = c.allocate(n, burstPods, iter)
		b.StopTimer()
		ipam.writes = c.apiserverWrites().minus(before)
		abortAll(b, n, pending)
		b.StartTimer()
	}
	b.StopTimer()

	b.ReportMetric(burstPods, "pods")
	b.ReportMetric(burstParallel, "parallel-adds")
	cni.report(b, "")
	ipam.report(b, "ipam-")
}

// report reports r's measurements with units that start with prefix.
func (r burstResult) report(b *testing.B, prefix string) {
	b.ReportMetric(r.adds.Seconds(), prefix+"s/burst")
	b.ReportMetric(float64(len(r.latencies))/r.adds.Seconds(), prefix+"pods/s")
	b.ReportMetric(ms(benchkit.Percentile(r.latencies, 50)), prefix+"ms/add-p50")
	b.ReportMetric(ms(benchkit.Percentile(r.latencies, 99)), prefix+"ms/add-p99")
	b.ReportMetric(r.reported.Seconds(), prefix+"s/reported")
	var total int
	for key, v := range r.writes {
		total += v
		b.ReportMetric(float64(v), prefix+"writes:"+key)
	}
	b.ReportMetric(float64(total), prefix+"writes-total")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// burstResult is one iteration's measurements.
type burstResult struct {
	adds      time.Duration   // first ADD started → last ADD returned
	latencies []time.Duration // of each ADD
	reported  time.Duration   // first ADD started → NodeIPAM status shows every pod
	writes    writeCounts
}

// createPods creates count Pods bound to n in burstNamespace with one
// kubectl call, as the scheduler would have bound them.
func (c *cluster) createPods(n *node, count int) {
	c.t.Helper()
	var list bytes.Buffer
	list.WriteString(`{"apiVersion":"v1","kind":"List","items":[`)
	for i := range count {
		if i > 0 {
			list.WriteByte(',')
		}
		fmt.Fprintf(&list, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod-%d","namespace":%q,"labels":{"app":"burst"}},`+
			`"spec":{"nodeName":%q,"containers":[{"name":"c","image":"registry.invalid/test:1"}]}}`, i, burstNamespace, n.name)
	}
	list.WriteString(`]}`)
	c.kubectl(list.Bytes(), "create", "-f", "-")
}

// waitFree waits until n's agent has at least want free IPv4 addresses:
// the operator has assigned the blocks and the agent has loaded them.
func waitFree(t testing.TB, n *node, want int) {
	t.Helper()
	client := api.NewClient(n.sim.Socket, 2*time.Second)
	defer client.Close()
	eventually(t, fmt.Sprintf("%s has %d free addresses", n.name, want), func() (bool, string) {
		st, err := client.Status(t.Context())
		if err != nil {
			return false, err.Error()
		}
		var free uint64
		for _, p := range st.Pools {
			if p.CIDR.Addr().Is4() && !p.Draining {
				free += p.Free
			}
		}
		return free >= uint64(want), fmt.Sprintf("%d free in %+v", free, st.Pools)
	})
}

// burst ADDs one pod per netns, burstParallel at a time, then waits for
// the NodeIPAM status to report them.
func (c *cluster) burst(n *node, netnses []ns.NetNS, iter int) burstResult {
	t := c.t
	t.Helper()
	var (
		mu    sync.Mutex
		r     burstResult
		addrs = make([]netip.Addr, len(netnses))
		errs  []string
		next  = make(chan int)
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range burstParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rt := nodesim.Runtime(burstContainer(iter, i), netnses[i], "eth0", burstNamespace, fmt.Sprintf("pod-%d", i))
				t0 := time.Now()
				res, err := n.sim.Add(t.Context(), rt)
				d := time.Since(t0)
				mu.Lock()
				r.latencies = append(r.latencies, d)
				if err == nil {
					addrs[i], err = firstAddress(res)
				}
				if err != nil {
					errs = append(errs, fmt.Sprintf("pod-%d: %v", i, err))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range netnses {
		next <- i
	}
	close(next)
	wg.Wait()
	r.adds = time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d of %d ADDs failed, first: %s", len(errs), len(netnses), errs[0])
	}
	c.checkUnique(n, addrs)
	c.waitReported(n, len(netnses))
	r.reported = time.Since(start)
	return r
}

// checkUnique fails unless every address is unique and inside n's blocks.
func (c *cluster) checkUnique(n *node, addrs []netip.Addr) {
	t := c.t
	t.Helper()
	n.blocks = c.currentBlocks(n)
	seen := make(map[netip.Addr]int, len(addrs))
	for i, a := range addrs {
		if j, dup := seen[a]; dup {
			t.Fatalf("pod-%d and pod-%d both got %s", j, i, a)
		}
		seen[a] = i
		if !n.owns(a) {
			t.Fatalf("pod-%d got %s, outside the node's blocks %v", i, a, n.blocks)
		}
	}
}

// waitReported waits until n's NodeIPAM status reports want addresses
// allocated.
func (c *cluster) waitReported(n *node, want int) {
	eventually(c.t, fmt.Sprintf("%s's NodeIPAM reports %d allocated", n.name, want), func() (bool, string) {
		got := c.reportedAllocated(n)
		return got == want, fmt.Sprintf("%d reported", got)
	})
}

// allocate sends count ADD requests straight to n's agent,
// burstParallel at a time, checks the addresses, and waits for the
// NodeIPAM status to report them. It returns what abortAll needs to
// release them.
func (c *cluster) allocate(n *node, count, iter int) (burstResult, []api.OpRequest) {
	t := c.t
	t.Helper()
	var (
		mu      sync.Mutex
		r       burstResult
		addrs   = make([]netip.Addr, count)
		pending = make([]api.OpRequest, count)
		errs    []string
		next    = make(chan int)
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range burstParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := api.NewClient(n.sim.Socket, 10*time.Second)
			defer client.Close()
			for i := range next {
				att := api.Attachment{ContainerID: fmt.Sprintf("alloc-%d-%d", iter, i), IfName: "eth0"}
				t0 := time.Now()
				resp, err := client.Add(t.Context(), api.AddRequest{
					Attachment: att, Netns: "/var/run/netns/unused",
					Pod: api.PodRef{Namespace: burstNamespace, Name: fmt.Sprintf("pod-%d", i)},
				})
				d := time.Since(t0)
				mu.Lock()
				r.latencies = append(r.latencies, d)
				switch {
				case err != nil:
					errs = append(errs, fmt.Sprintf("allocation %d: %v", i, err))
				case len(resp.Addresses) == 0:
					errs = append(errs, fmt.Sprintf("allocation %d: no address", i))
				default:
					addrs[i] = resp.Addresses[0].Address.Addr()
					pending[i] = api.OpRequest{Attachment: att, OpID: resp.OpID}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	r.adds = time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d of %d allocations failed, first: %s", len(errs), count, errs[0])
	}
	c.checkUnique(n, addrs)
	c.waitReported(n, count)
	r.reported = time.Since(start)
	return r, pending
}

// abortAll rolls back the allocations allocate made, as a plugin whose
// wiring failed would.
func abortAll(t testing.TB, n *node, pending []api.OpRequest) {
	t.Helper()
	client := api.NewClient(n.sim.Socket, 10*time.Second)
	defer client.Close()
	for _, op := range pending {
		if err := client.Abort(t.Context(), op); err != nil {
			t.Fatalf("abort %s: %v", op.ContainerID, err)
		}
	}
}

func burstContainer(iter, i int) string { return fmt.Sprintf("burst-%d-%d", iter, i) }

// firstAddress is the address of a CNI result's first IP.
func firstAddress(res types.Result) (netip.Addr, error) {
	r, err := types100.GetResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(r.IPs) == 0 {
		return netip.Addr{}, fmt.Errorf("result without addresses: %v", r)
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	return a.Unmap(), nil
}

// delAll DELs every pod of the burst, burstParallel at a time.
func (c *cluster) delAll(n *node, netnses []ns.NetNS, iter int) {
	t := c.t
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	var errs []string
	for range burstParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rt := nodesim.Runtime(burstContainer(iter, i), netnses[i], "eth0", burstNamespace, fmt.Sprintf("pod-%d", i))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := n.sim.Del(ctx, rt)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("pod-%d: %v", i, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range netnses {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d DELs failed, first: %s", len(errs), errs[0])
	}
}

// nodeIPAM reads n's NodeIPAM.
func (c *cluster) nodeIPAM(n *node) v1alpha1.NodeIPAM {
	c.t.Helper()
	var obj v1alpha1.NodeIPAM
	if err := json.Unmarshal(c.kubectl(nil, "get", "nodeipam", n.name, "-o", "json"), &obj); err != nil {
		c.t.Fatal(err)
	}
	return obj
}

// currentBlocks is the blocks n's NodeIPAM assigns now.
func (c *cluster) currentBlocks(n *node) []netip.Prefix {
	var out []netip.Prefix
	for _, b := range c.nodeIPAM(n).Spec.Blocks {
		p, err := netip.ParsePrefix(string(b.CIDR))
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// reportedAllocated is the sum of the allocations n's agent reports.
func (c *cluster) reportedAllocated(n *node) int {
	var sum int
	for _, u := range c.nodeIPAM(n).Status.Blocks {
		sum += int(u.Allocated)
	}
	return sum
}

// writeCounts are write requests the API server served, by
// resource[/subresource].
type writeCounts map[string]int

// minus is w less before, keeping only what grew.
func (w writeCounts) minus(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range w {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// requestTotal matches one apiserver_request_total sample.
var requestTotal = regexp.MustCompile(`^apiserver_request_total\{(.*)\} (\d+)$`)

// label matches one label of a sample.
var label = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiserverWrites reads the API server's /metrics and sums its write
// requests by resource.
func (c *cluster) apiserverWrites() writeCounts {
	c.t.Helper()
	out := writeCounts{}
	sc := bufio.NewScanner(bytes.NewReader(c.kubectl(nil, "get", "--raw", "/metrics")))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := requestTotal.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		if !slices.Contains(writeVerbs, labels["verb"]) {
			continue
		}
		v, err := strconv.Atoi(m[2])
		if err != nil {
			c.t.Fatalf("parse %q: %v", sc.Text(), err)
		}
		key := labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		out[strings.ReplaceAll(key, " ", "_")] += v
	}
	if err := sc.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}
