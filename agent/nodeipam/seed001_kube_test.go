package nodeipam

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/store"
)

// TestKubeSeed001ReconcileSparesLivePods replays the whereabouts
// reconciler race against a real API server, with the orphan reconcile
// running all along (every 20ms and on every pod event):
//
//   - web-1 is Pending and its IP is not in its status yet when the
//     reconcile looks (whereabouts freed such an address);
//   - web-0 is deleted without a CNI DEL (its node's pod GC) and re-created
//     by its StatefulSet under the same name with a new UID, Pending;
//   - web-2 is created and allocated between the reconcile's pod list and
//     its release (the list cannot know it);
//   - gone-0 is deleted without a DEL and never comes back.
//
// Result: no address of a pod that exists is ever freed, no address is
// held twice, and the addresses of the pods that are gone (old web-0,
// gone-0) are freed.
func TestKubeSeed001ReconcileSparesLivePods(t *testing.T) {
	c := startCluster(t)
	const nodeName, block = "node-sts", "10.244.3.0/28"
	c.createNodeIPAM(t, nodeName, c.createNode(t, nodeName), block)

	var a *agent
	var armed atomic.Bool
	var mu sync.Mutex
	var web2 pod
	var web2Addr netip.Addr
	replayed := make(chan struct{})
	h := hooks{afterPodList: func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		defer close(replayed)
		p := c.createPod(t, "web-2", nodeName)
		addr := a.mustAdd(t, "sandbox-web-2", p)
		mu.Lock()
		web2, web2Addr = p, addr
		mu.Unlock()
	}}
	a = c.startAgent(t, t.TempDir(), nodeName, h, func(o *Options) { o.OrphanInterval = 20 * time.Millisecond })
	a.ready(t)

	// reconcile runs the reconcile in the test's goroutine as well, racing
	// the agent's own.
	reconcile := func() {
		t.Helper()
		for range 3 {
			if _, err := a.syncer.reconcileOrphans(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// holds fails the test unless uid's pod holds addr.
	holds := func(p pod, addr netip.Addr) {
		t.Helper()
		if got := a.allocated(t)[addr]; got != p.uid {
			t.Fatalf("%s of %s (uid %s) was freed or moved: held by %q", addr, p, p.uid, got)
		}
	}

	oldWeb0, x := c.startPod(t, a, "web-0", nodeName)

	// The whereabouts window: allocated, Pending, no IP in its status.
	web1 := c.createPod(t, "web-1", nodeName)
	y := a.mustAdd(t, "sandbox-web-1", web1)
	reconcile()
	holds(web1, y)

	// The StatefulSet re-creates web-0 with a new UID; the old sandbox
	// never got its DEL.
	c.deletePod(t, oldWeb0)
	newWeb0 := c.createPod(t, "web-0", nodeName)
	z := a.mustAdd(t, "sandbox-web-0-b", newWeb0)
	if z == x {
		t.Fatalf("new web-0 got %s while the old sandbox may still hold it", z)
	}
	reconcile()
	holds(web1, y)
	holds(newWeb0, z)

	// A pod gone for good, and the exact interleaving: web-2's ADD lands
	// after the pod list that the release of gone-0 is judged by.
	gone, g := c.startPod(t, a, "gone-0", nodeName)
	armed.Store(true)
	c.deletePod(t, gone)
	select {
	case <-replayed:
	case <-time.After(90 * time.Second):
		t.Fatal("no reconcile listed pods after gone-0 was deleted")
	}
	mu.Lock()
	w2, w := web2, web2Addr
	mu.Unlock()
	reconcile()
	holds(w2, w)
	holds(web1, y)
	holds(newWeb0, z)
	eventually(t, "gone-0's address is freed", func() (bool, string) {
		reconcile()
		return a.allocated(t)[g] != gone.uid, fmt.Sprint(a.allocated(t))
	})

	// Kubelet reports the new web-0 running: the old web-0's sandbox is
	// now clearly no pod's, and its address goes.
	c.podRunning(t, newWeb0, z)
	eventually(t, "the old web-0's address is freed", func() (bool, string) {
		reconcile()
		return a.allocated(t)[x] != oldWeb0.uid, fmt.Sprint(a.allocated(t))
	})
	c.podRunning(t, web1, y)
	c.podRunning(t, w2, w)
	reconcile()

	// Every pod that exists holds its address, and nothing is held twice
	// (allocated fails the test on a duplicate), also for pods started
	// now that freed addresses are available again.
	for i := range 4 {
		c.startPod(t, a, fmt.Sprintf("web-%d", 3+i), nodeName)
	}
	reconcile()
	live := c.livePods(t)
	held := map[string]bool{}
	for _, uid := range a.allocated(t) {
		held[uid] = true
		if !live[uid] {
			t.Errorf("endpoint of pod uid %s, which is gone, survived", uid)
		}
	}
	for uid := range live {
		if !held[uid] {
			t.Errorf("pod uid %s exists but its address was freed", uid)
		}
	}
	if n, _ := store.CountAllocations(a.st.ReadTxn(), block); n != len(live) {
		t.Errorf("%d allocations for %d pods", n, len(live))
	}
}
