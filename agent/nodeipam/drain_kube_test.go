package nodeipam

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/store"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	"lockstep.dev/lockstep/kube/api/fields"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/kube/operator"
)

// TestKubePoolShrinkDrainsBusyBlock runs the real operator and agent
// against a real API server. Pool v4 is 10.244.0.0/28, cut into /29s; the
// node holds b0 with three pods when an administrator shrinks the pool to
// 10.244.0.8/29, leaving b0 outside. Then:
//
//   - the operator marks b0 with a drain mark at once (its excess delay is
//     an hour) and gives the node b1, since b0 counts as no free address;
//   - the three pods keep their addresses, and new pods get addresses of
//     b1, never of b0;
//   - b0 stays assigned, the mark in place, while the agent answers
//     do-not-release;
//   - once the pods are gone (one by CNI DEL, two by pod deletion and the
//     orphan reconcile) the agent answers ready-for-release with no new
//     spec, the operator takes b0 back, and the agent drops it.
//
// A raw watch checks every version of the NodeIPAM: a block leaves
// spec.blocks only from a version that satisfied MayRelease, and only
// while the agent's store holds no address inside it; and no current
// ready-for-release answer is ever written for a block holding an address.
func TestKubePoolShrinkDrainsBusyBlock(t *testing.T) {
	c := startCluster(t)
	const nodeName = "node-shrink"
	const (
		b0 = "10.244.0.0/29"
		b1 = "10.244.0.8/29"
	)
	lc, err := client.NewForConfig(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	pools := lc.IPPools()
	pool := &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "v4"},
		Spec:       v1alpha1.IPPoolSpec{CIDRs: []v1alpha1.CIDR{"10.244.0.0/28"}, BlockSize: 29},
	}
	if _, err := pools.Create(t.Context(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.createNode(t, nodeName)

	a := c.startAgent(t, t.TempDir(), nodeName, hooks{}, nil)
	inv := c.watchDrain(t, nodeName, a)
	c.startOperator(t)
	a.ready(t)
	if got := blocksOf(c.nodeIPAM(t, nodeName)); !slices.Equal(got, []string{b0}) {
		t.Fatalf("the node got %v, want [%s]", got, b0)
	}

	var old []pod
	oldAddr := map[netip.Addr]string{}
	for i := range 3 {
		p, addr := c.startPod(t, a, fmt.Sprintf("old-%d", i), nodeName)
		if !netip.MustParsePrefix(b0).Contains(addr) {
			t.Fatalf("pod %s got %s, outside %s", p, addr, b0)
		}
		old = append(old, p)
		oldAddr[addr] = p.uid
	}
	eventually(t, "the agent reports three addresses in use", func() (bool, string) {
		n := c.nodeIPAM(t, nodeName)
		return slices.Contains(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: b0, Allocated: 3}), fmt.Sprint(n.Status.Blocks)
	})
	if got := blocksOf(c.nodeIPAM(t, nodeName)); !slices.Equal(got, []string{b0}) {
		t.Fatalf("before the shrink the node holds %v, want [%s] (five free addresses are enough)", got, b0)
	}

	// The administrator gives 10.244.0.0/29 back to the network.
	for {
		p, err := pools.Get(t.Context(), "v4", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.CIDRs = []v1alpha1.CIDR{b1}
		if _, err = pools.Update(t.Context(), p, metav1.UpdateOptions{}); err == nil {
			break
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	eventually(t, "b0 drains, refused by the agent, and the node gets b1", func() (bool, string) {
		n := c.nodeIPAM(t, nodeName)
		ans := n.Status.Answer(b0)
		return n.Spec.Draining(b0) && n.Spec.Block(b1) != nil && n.StatusCurrent() &&
				ans != nil && ans.State == v1alpha1.DoNotRelease && a.block(t, b1) != nil,
			fmt.Sprintf("spec %+v, status %+v", n.Spec, n.Status)
	})
	if b := a.block(t, b0); b.State != store.BlockQuarantined || !a.pool(t, b0).Draining {
		t.Fatalf("the agent's %s: %+v, want quarantined", b0, b)
	}

	// Pods keep their addresses; new ones get addresses of b1.
	var fresh []pod
	for i := range 2 {
		p, addr := c.startPod(t, a, fmt.Sprintf("new-%d", i), nodeName)
		if !netip.MustParsePrefix(b1).Contains(addr) {
			t.Fatalf("pod %s got %s after the shrink, want an address of %s", p, addr, b1)
		}
		fresh = append(fresh, p)
	}
	time.Sleep(2 * time.Second) // several operator passes (resync 1s)
	n := c.nodeIPAM(t, nodeName)
	if n.Spec.Block(b0) == nil || !n.Spec.Draining(b0) {
		t.Fatalf("while b0 holds pods: spec %+v, want it assigned and draining", n.Spec)
	}
	allocated := a.allocated(t)
	for addr, uid := range oldAddr {
		if allocated[addr] != uid {
			t.Fatalf("the drain took %s from pod uid %s", addr, uid)
		}
	}

	// The pods of b0 go: one with a CNI DEL, two deleted while their node
	// is away (no DEL), found by the orphan reconcile.
	a.del(t, "sandbox-old-0")
	c.deletePod(t, old[0])
	n = c.answered(t, nodeName)
	if ans := n.Status.Answer(b0); ans == nil || ans.State != v1alpha1.DoNotRelease || n.Spec.Block(b0) == nil {
		t.Fatalf("with two pods left in b0: answer %+v, blocks %v", ans, blocksOf(n))
	}
	c.deletePod(t, old[1])
	c.deletePod(t, old[2])
	eventually(t, "b0 is released and dropped", func() (bool, string) {
		n := c.nodeIPAM(t, nodeName)
		return n.Spec.Block(b0) == nil && n.Spec.Mark(b0) == nil && a.block(t, b0) == nil && a.pool(t, b0) == nil,
			fmt.Sprintf("spec %+v, status %+v, agent's block %+v", n.Spec, n.Status, a.block(t, b0))
	})
	for _, p := range fresh {
		found := false
		for _, uid := range a.allocated(t) {
			found = found || uid == p.uid
		}
		if !found {
			t.Fatalf("pod %s lost its address", p)
		}
	}
	if got := blocksOf(c.nodeIPAM(t, nodeName)); !slices.Equal(got, []string{b1}) {
		t.Fatalf("at the end the node holds %v, want [%s]", got, b1)
	}
	inv.check(t, b0)
}

func blocksOf(n *v1alpha1.NodeIPAM) []string {
	var out []string
	for _, b := range n.Spec.Blocks {
		out = append(out, string(b.CIDR))
	}
	return out
}

// startOperator runs the lockstep operator in this process, alone (no
// leader election), until the test ends. Its excess delay is an hour, so
// every release the test sees is a drain.
func (c *cluster) startOperator(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("who", "operator")
	go func() {
		done <- operator.Run(ctx, operator.Config{
			REST: c.cfg, MinFree: 4, ExcessReleaseDelay: time.Hour, Resync: time.Second, Logger: log,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the operator did not stop within 30s")
		}
	})
}

// drainWatch records every NodeIPAM version that broke the handshake.
type drainWatch struct {
	mu         sync.Mutex
	violations []string
	released   []string // blocks seen leaving spec.blocks
	versions   int
}

// watchDrain follows node's NodeIPAM with a raw watch (an informer may
// skip versions) and, at every version, checks against agent a's store
// that no block holding an address is taken back or answered
// ready-for-release. The agent quarantined the block before it could
// answer, so its count can only fall: a count above zero seen after the
// version means there was one at the version.
func (c *cluster) watchDrain(t *testing.T, node string, a *agent) *drainWatch {
	t.Helper()
	w := &drainWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	selector := fields.OneTermEqualSelector("metadata.name", node).String()
	list, err := c.ipams.List(t.Context(), metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	done := make(chan struct{})
	go func() {
		defer close(done)
		var prev *v1alpha1.NodeIPAM
		for ctx.Err() == nil {
			wi, err := c.ipams.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						break // the test is over
					}
					w.mu.Lock()
					w.violations = append(w.violations, fmt.Sprintf("the watch lost versions after %s: %v", rv, ev.Object))
					w.mu.Unlock()
					wi.Stop()
					return
				}
				n, ok := ev.Object.(*v1alpha1.NodeIPAM)
				if !ok {
					continue
				}
				rv = n.ResourceVersion
				if ev.Type == watch.Deleted {
					prev = nil
					continue
				}
				w.mu.Lock()
				w.versions++
				w.judge(prev, n, a.st)
				w.mu.Unlock()
				prev = n
			}
			wi.Stop()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		// Reported here, so that a test failing early shows them too.
		for _, v := range w.violations {
			t.Error(v)
		}
	})
	return w
}

// judge checks one version n after prev (nil: the first seen).
func (w *drainWatch) judge(prev, n *v1alpha1.NodeIPAM, st *store.Store) {
	used := func(cidr v1alpha1.CIDR) uint64 {
		count, err := endpoints.CountIn(st.ReadTxn(), netip.MustParsePrefix(string(cidr)))
		if err != nil {
			w.violations = append(w.violations, err.Error())
		}
		return count
	}
	if prev != nil && prev.UID == n.UID {
		for _, b := range prev.Spec.Blocks {
			if n.Spec.Block(b.CIDR) != nil {
				continue
			}
			w.released = append(w.released, string(b.CIDR))
			if !prev.MayRelease(b.CIDR) {
				w.violations = append(w.violations, fmt.Sprintf("%s left spec.blocks at generation %d without a current ready-for-release answer", b.CIDR, n.Generation))
			}
			if u := used(b.CIDR); u != 0 {
				w.violations = append(w.violations, fmt.Sprintf("%s left spec.blocks at generation %d holding %d addresses", b.CIDR, n.Generation, u))
			}
		}
	}
	if !n.StatusCurrent() {
		return
	}
	for _, ans := range n.Status.Releases {
		if ans.State != v1alpha1.ReadyForRelease {
			continue
		}
		if u := used(ans.CIDR); u != 0 {
			w.violations = append(w.violations, fmt.Sprintf("%s answered ready-for-release at generation %d holding %d addresses", ans.CIDR, n.Generation, u))
		}
	}
}

// check fails t unless exactly the blocks in want were seen released.
// Violations are reported when the test ends.
func (w *drainWatch) check(t *testing.T, want ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Equal(w.released, want) {
		t.Errorf("blocks seen released %v, want %v (%d versions watched)", w.released, want, w.versions)
	}
}
