package operator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	apiequality "lockstep.dev/lockstep/kube/api/equality"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// simAgent plays a node's agent against the real API server: pods come
// and go in its blocks, it reports usage, and it answers release marks
// as the handshake says (ready-for-release only for an empty block, which
// it then quarantines). It checks what the real agent would trip over: a
// block taken away while it still holds pods.
type simAgent struct {
	cl          *cluster
	name        string
	rng         *rand.Rand
	pods        int // target
	alloc       map[v1alpha1.CIDR]int32
	quarantined map[v1alpha1.CIDR]bool
	last        *v1alpha1.NodeIPAMStatus // as last stored
	writes      int
	conflicts   int
	violations  []string
}

// run steps until stop ends. Requests are not cut short by stop: a write
// the API server applied must be one the agent knows it made.
func (a *simAgent) run(stop context.Context) error {
	next := time.Now()
	for stop.Err() == nil {
		if time.Now().After(next) {
			a.pods, next = a.rng.IntN(48), time.Now().Add(time.Duration(500+a.rng.IntN(1000))*time.Millisecond)
		}
		if err := a.step(a.cl.t.Context()); err != nil {
			return err
		}
		time.Sleep(time.Duration(5+a.rng.IntN(30)) * time.Millisecond)
	}
	return nil
}

// step reads the NodeIPAM, acts on it, and writes status; on a conflict
// it reads again.
func (a *simAgent) step(ctx context.Context) error {
	ipams := a.cl.c.lockstep.NodeIPAMs()
	for {
		n, err := ipams.Get(ctx, a.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for cidr, used := range a.alloc {
			if n.Spec.Block(cidr) == nil {
				if used > 0 {
					a.violations = append(a.violations, fmt.Sprintf("node %s: block %s taken at generation %d while it held %d pods", a.name, cidr, n.Generation, used))
				}
				delete(a.alloc, cidr)
				delete(a.quarantined, cidr)
			}
		}
		var answers []v1alpha1.ReleaseAnswer
		for _, b := range n.Spec.Blocks {
			m := n.Spec.Mark(b.CIDR)
			if m == nil || m.State != v1alpha1.MarkedForRelease {
				delete(a.quarantined, b.CIDR) // a withdrawn mark lifts the quarantine
				continue
			}
			state := v1alpha1.DoNotRelease
			if a.alloc[b.CIDR] == 0 {
				a.quarantined[b.CIDR] = true
				state = v1alpha1.ReadyForRelease
			}
			answers = append(answers, v1alpha1.ReleaseAnswer{CIDR: b.CIDR, State: state, Since: metav1.Now()})
		}
		a.walk(n)

		n.Status.ObservedGeneration = n.Generation
		n.Status.Releases = answers
		n.Status.Blocks = nil
		for _, b := range n.Spec.Blocks {
			n.Status.Blocks = append(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: b.CIDR, Allocated: a.alloc[b.CIDR]})
		}
		now := metav1.Now()
		n.Status.LastReportTime = &now
		out, err := ipams.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			a.conflicts++
			continue
		}
		if err != nil {
			return err
		}
		a.writes++
		a.last = out.Status.DeepCopy()
		return nil
	}
}

// walk moves the pod count one step towards the target, allocating only
// from assigned blocks that are neither marked nor quarantined.
func (a *simAgent) walk(n *v1alpha1.NodeIPAM) {
	total := 0
	for _, used := range a.alloc {
		total += int(used)
	}
	for range min(8, abs(a.pods-total)) {
		if total < a.pods {
			for _, b := range n.Spec.Blocks {
				p, _ := b.CIDR.Prefix()
				if n.Spec.Mark(b.CIDR) == nil && !a.quarantined[b.CIDR] && int64(a.alloc[b.CIDR]) < capacity(p) {
					a.alloc[b.CIDR]++
					total++
					break
				}
			}
			continue
		}
		for cidr, used := range a.alloc {
			if used > 0 {
				a.alloc[cidr]--
				total--
				break
			}
		}
	}
}

func abs(x int) int { return max(x, -x) }

// TestKubeConflictStormLosesNoUpdate runs two operator replicas that both
// write (leader election off, as if both believed they led) against six
// simulated agents rewriting status as fast as the API server takes it.
// Every write is conditional, so writers conflict constantly; the test
// proves nothing is lost to that:
//
//   - no block is ever held by two NodeIPAMs at once (checked on every
//     version the watch delivers, and at the end);
//   - a block only ever leaves a spec through the handshake: the version
//     before had a current ready-for-release answer, the one after a
//     released mark;
//   - no agent ever has a block taken while it holds pods, and every
//     block it holds pods in is still assigned to it at the end;
//   - every agent's last status write is the stored status;
//   - no pending assignment is left on the pool, and its count is right.
func TestKubeConflictStormLosesNoUpdate(t *testing.T) {
	const storm = 10 * time.Second
	cl := startCluster(t)
	inv := cl.watchInvariants()
	cl.createPool("v4", 28, "10.0.0.0/22") // 64 blocks of 16
	names := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	for _, n := range names {
		cl.createNode(n)
	}
	o := opts{leaderElect: false, minFree: 8, delay: 300 * time.Millisecond}
	r1, r2 := cl.startReplica("r1", o), cl.startReplica("r2", o)
	for _, n := range names {
		cl.eventually(30*time.Second, "node "+n+" has a block", cl.hasBlock(n))
	}

	ctx, cancel := context.WithTimeout(t.Context(), storm)
	defer cancel()
	agents := make([]*simAgent, len(names))
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, n := range names {
		agents[i] = &simAgent{cl: cl, name: n, rng: rand.New(rand.NewPCG(uint64(i), 42)),
			alloc: map[v1alpha1.CIDR]int32{}, quarantined: map[v1alpha1.CIDR]bool{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- agents[i].run(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
	}
	// One writer finishes what is in flight (a pending assignment r2 was
	// stopped in the middle of, timers r2 started): wait until it has
	// nothing left to do, nothing changing for a second.
	r2.stop(t)
	var last string
	cl.eventually(20*time.Second, "the remaining replica settles: nothing pending, the pool's count right, nothing changing", func() (bool, string) {
		pool := cl.getPool("v4")
		list, err := cl.c.lockstep.NodeIPAMs().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		held := 0
		sig := pool.ResourceVersion
		for _, n := range list.Items {
			held += len(n.Spec.Blocks)
			sig += "," + n.ResourceVersion
		}
		_, pending := pool.Annotations[PendingBlocksAnnotation]
		still := sig == last
		last = sig
		if !still {
			time.Sleep(time.Second)
		}
		return still && !pending && int(pool.Status.AllocatedBlocks) == held,
			fmt.Sprintf("pending %v, pool counts %d, nodeipams hold %d, unchanged for a second %v", pending, pool.Status.AllocatedBlocks, held, still)
	})
	r1.stop(t)

	agentWrites, agentConflicts := 0, 0
	for _, a := range agents {
		agentWrites += a.writes
		agentConflicts += a.conflicts
		for _, v := range a.violations {
			t.Error(v)
		}
		n := cl.nodeIPAM(a.name)
		for cidr, used := range a.alloc {
			if used > 0 && n.Spec.Block(cidr) == nil {
				t.Errorf("node %s holds %d pods in %s, which is no longer assigned to it", a.name, used, cidr)
			}
		}
		if !apiequality.Semantic.DeepEqual(&n.Status, a.last) {
			t.Errorf("node %s: stored status is not the agent's last write:\nstored %+v\nwrote  %+v", a.name, n.Status, *a.last)
		}
	}
	inv.check(t)
	list, err := cl.c.lockstep.NodeIPAMs().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[v1alpha1.CIDR]string{}
	for _, n := range list.Items {
		for _, b := range n.Spec.Blocks {
			if other, ok := owner[b.CIDR]; ok {
				t.Errorf("block %s assigned to %s and %s", b.CIDR, other, n.Name)
			}
			owner[b.CIDR] = n.Name
		}
	}
	pool := cl.getPool("v4")
	if raw, ok := pool.Annotations[PendingBlocksAnnotation]; ok {
		t.Errorf("pending assignment left on the pool: %s", raw)
	}
	if int(pool.Status.AllocatedBlocks) != len(owner) {
		t.Errorf("pool status counts %d allocated blocks, nodeipams hold %d", pool.Status.AllocatedBlocks, len(owner))
	}

	inv.mu.Lock()
	assigned, released := inv.assigned, inv.released
	inv.mu.Unlock()
	conflicts := r1.conflicts.Load() + r2.conflicts.Load()
	t.Logf("storm: %d agent status writes (%d conflicts), operator writes r1=%d r2=%d (%d conflicts), %d blocks assigned, %d released, %d held at the end",
		agentWrites, agentConflicts, r1.writes.Load(), r2.writes.Load(), conflicts, assigned, released, len(owner))
	// A storm without conflicts, assignments or releases proved nothing.
	if conflicts == 0 || agentConflicts == 0 {
		t.Errorf("no conflicts (operators %d, agents %d): the storm did not storm", conflicts, agentConflicts)
	}
	if r1.writes.Load() == 0 || r2.writes.Load() == 0 {
		t.Errorf("a replica never wrote (r1 %d, r2 %d): not two writers", r1.writes.Load(), r2.writes.Load())
	}
	if released == 0 || assigned <= len(names) {
		t.Errorf("%d blocks assigned, %d released: the handshake never ran", assigned, released)
	}
}
