package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeUsageReportsAreBatched allocates 1000 addresses and checks that
// the usage report costs a handful of status writes (at most one per
// report interval, plus the ones a handshake answer needs), that ADDs go
// on while the API server is down, and that the report catches up once it
// is back.
func TestKubeUsageReportsAreBatched(t *testing.T) {
	c := startCluster(t)
	const nodeName, block = "node-churn", "10.244.16.0/20" // 4094 addresses
	c.createNodeIPAM(t, nodeName, c.createNode(t, nodeName), block)
	const interval = 200 * time.Millisecond
	a := c.startAgent(t, t.TempDir(), nodeName, hooks{}, func(o *Options) { o.ReportInterval = interval })
	a.ready(t)
	c.answered(t, nodeName)

	const allocations = 1000
	before := a.syncer.Writes()
	start := time.Now()
	for i := range allocations {
		// Pods without API objects: the orphan reconcile runs hourly here.
		a.mustAdd(t, fmt.Sprintf("churn-%d", i), pod{"web", fmt.Sprintf("churn-%d", i), fmt.Sprintf("uid-churn-%d", i)})
	}
	elapsed := time.Since(start)
	reported(t, c, nodeName, block, allocations)
	writes := a.syncer.Writes() - before
	t.Logf("%d allocations in %s: %d status writes (report interval %s)", allocations, elapsed.Round(time.Millisecond), writes, interval)
	// One write per interval the ADDs spanned, one for the tail; the
	// bound is what coalescing promises, whatever the machine's speed.
	if limit := uint64(elapsed/interval) + 2; writes > limit {
		t.Errorf("%d status writes for %d allocations in %s; coalescing allows at most %d", writes, allocations, elapsed, limit)
	}
	if writes >= allocations/10 {
		t.Errorf("%d status writes per %d allocations: the report is not batched", writes, allocations)
	}

	// The API server goes away: ADDs do not notice.
	if err := c.env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		addr := a.mustAdd(t, fmt.Sprintf("outage-%d", i), pod{"web", fmt.Sprintf("outage-%d", i), fmt.Sprintf("uid-outage-%d", i)})
		if !netip.MustParsePrefix(block).Contains(addr) {
			t.Fatalf("ADD during the outage got %s", addr)
		}
	}
	if err := c.env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	reported(t, c, nodeName, block, allocations+50)
}

// reported waits until node's status reports want addresses allocated in
// block.
func reported(t *testing.T, c *cluster, node, block string, want int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("usage of %s reported as %d", block, want), func() (bool, string) {
		n, err := c.ipams.Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, u := range n.Status.Blocks {
			if u.CIDR == v1alpha1.CIDR(block) {
				return u.Allocated == want, fmt.Sprintf("%d allocated", u.Allocated)
			}
		}
		return false, fmt.Sprintf("%+v", n.Status.Blocks)
	})
}
