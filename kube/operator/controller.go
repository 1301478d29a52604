package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// debounce is how long a pass waits after the event that woke it, so that
// a burst of events is planned once.
const debounce = 20 * time.Millisecond

// controller is one leadership term of the operator: informers on Nodes,
// IPPools, NodeIPAMs and pods, and a loop that plans on their caches and writes
// the plan. Every request it makes carries the term's context, so a lost
// lease aborts them.
type controller struct {
	c        *clients
	log      *slog.Logger
	identity string
	minFree  int64
	delay    time.Duration
	resync   time.Duration

	nodes, pools, ipams *client.Informer
	pods                *client.Informer // trimmed: addresses only
	kick                chan struct{}
	timers              timers
	reserved            map[string]reservation
	notes               map[string]bool // logged last pass, not to repeat

	// ops counts what the term does and learns its state; heartbeat is
	// the term's loop, registered once the informers have listed.
	ops       *opsState
	heartbeat *watchdog.Loop
}

func newController(c *clients, cfg *Config, o *opsState) *controller {
	ctl := &controller{
		c:        c,
		log:      cfg.Logger,
		identity: cfg.Identity,
		minFree:  int64(cfg.MinFree),
		delay:    cfg.ExcessReleaseDelay,
		resync:   cfg.Resync,
		kick:     make(chan struct{}, 1),
		timers:   timers{},
		reserved: map[string]reservation{},
		notes:    map[string]bool{},
		ops:      o,
	}
	ctl.nodes = client.NewInformer(c.nodeListWatch(), cfg.Logger)
	ctl.nodes.SetTransform(trimNode)
	ctl.pools = client.NewInformer(c.lockstep.IPPools().ListWatch(nil), cfg.Logger)
	ctl.ipams = client.NewInformer(c.lockstep.NodeIPAMs().ListWatch(nil), cfg.Logger)
	ctl.pods = client.NewInformer(c.podListWatch(), cfg.Logger)
	ctl.pods.SetTransform(client.SlimPod)
	return ctl
}

// run runs the term until ctx ends.
func (c *controller) run(ctx context.Context) error {
	h := client.Handler{
		Add:    func(client.Object) { c.wake() },
		Update: func(client.Object, client.Object) { c.wake() },
		Delete: func(client.Object) { c.wake() },
	}
	for _, inf := range []*client.Informer{c.nodes, c.pools, c.ipams} {
		inf.AddHandler(h)
		go inf.Run(ctx)
	}
	// Pods wake no pass: a large cluster's pod churn would plan all the
	// time. A release a pod held back is tried again at the next pass (a
	// NodeIPAM's report, or the resync).
	go c.pods.Run(ctx)
	t0 := time.Now()
	if !client.WaitForSync(ctx, c.nodes, c.pools, c.ipams, c.pods) {
		return nil // ctx ended
	}
	c.log.Info("caches synced", "nodes", c.nodes.Len(), "ippools", c.pools.Len(),
		"nodeipams", c.ipams.Len(), "pods", c.pods.Len(), "took", time.Since(t0).Round(time.Millisecond))
	c.ops.termSynced()
	c.heartbeat = c.ops.loop("controller")
	defer c.heartbeat.Stop()

	retry := time.Duration(0)
	for {
		c.heartbeat.Beat()
		wake, err := c.pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		next := c.resync
		if err != nil {
			retry = min(max(2*retry, 100*time.Millisecond), 10*time.Second)
			c.log.Warn("pass incomplete; retrying", "in", retry, "err", err)
			next = retry
		} else {
			retry = 0
		}
		if !wake.IsZero() {
			next = min(next, time.Until(wake))
		}
		t := time.NewTimer(max(next, 0))
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-c.heartbeat.Tick(): // idle, not stuck: beat, keep waiting
				c.heartbeat.Beat()
			case <-c.kick:
				waiting = false
			case <-t.C:
				waiting = false
			}
		}
		t.Stop()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(debounce):
		}
	}
}

func (c *controller) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// input snapshots the caches.
func (c *controller) input(now time.Time) *input {
	in := &input{now: now, timers: c.timers, reserved: c.reserved, minFree: c.minFree, delay: c.delay}
	for _, o := range c.pools.List() {
		in.pools = append(in.pools, o.(*v1alpha1.IPPool))
	}
	for _, o := range c.nodes.List() {
		n := o.(*corev1.Node)
		in.nodes = append(in.nodes, node{name: n.Name, uid: n.UID, deleting: n.DeletionTimestamp != nil})
	}
	for _, o := range c.ipams.List() {
		in.nodeIPAMs = append(in.nodeIPAMs, o.(*v1alpha1.NodeIPAM))
	}
	var pods []*corev1.Pod
	for _, o := range c.pods.List() {
		pods = append(pods, o.(*corev1.Pod))
	}
	in.pods = newPodAddrs(pods)
	return in
}

// pass plans once and writes the plan. It returns when the next timer
// matures.
func (c *controller) pass(ctx context.Context) (wake time.Time, err error) {
	start := time.Now()
	in := c.input(start)
	p := planFor(in)
	planned := time.Since(start)
	defer func() {
		if ctx.Err() == nil { // a pass cut short by the end of the term is not a failure
			c.ops.observePass(time.Since(start), planned, err)
		}
	}()
	c.timers, c.reserved = p.timers, p.reserved
	notes := map[string]bool{}
	for _, n := range p.notes {
		if !c.notes[n] {
			c.log.Info(n)
		}
		notes[n] = true
	}
	c.notes = notes

	// Each write beats the heartbeat: a pass of many writes to a slow API
	// server is making progress, not stuck.
	var errs []error
	wrote := func(err error) {
		errs = append(errs, err)
		c.heartbeat.Beat()
	}
	for _, s := range p.deletes {
		wrote(c.deleteStale(ctx, s))
	}
	for _, n := range p.creates {
		wrote(c.create(ctx, n))
	}
	for _, u := range p.updates {
		wrote(c.updateSpec(ctx, u, in))
	}
	// Pools with blocks to cut, and pools carrying an assignment some
	// writer left unfinished (it lost its lease or crashed): assignFrom
	// completes that first.
	pools := map[string]bool{}
	for _, a := range p.assigns {
		pools[a.block.Pool] = true
	}
	for _, pool := range in.pools {
		if _, ok := pool.Annotations[PendingBlocksAnnotation]; ok {
			pools[pool.Name] = true
		}
	}
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		wrote(c.assignFrom(ctx, pool))
	}
	for _, pool := range p.poolStatus {
		wrote(c.updatePoolStatus(ctx, pool, in))
	}
	return p.wake, errors.Join(errs...)
}

// deleteStale deletes a NodeIPAM left by a previous Node of the same name
// (seed 003). The cache said the Node's UID differs from the owner's; the
// API server is asked again first, because deleting a current NodeIPAM
// would put blocks back in the pool while its agent allocates from them.
func (c *controller) deleteStale(ctx context.Context, s staleNodeIPAM) error {
	n, err := c.c.getNode(ctx, s.name)
	if apierrors.IsNotFound(err) {
		return nil // the Node is gone too: garbage collection's work
	}
	if err != nil {
		return fmt.Errorf("delete stale nodeipam %s: %w", s.name, err)
	}
	if n.UID == s.owner {
		return nil // the cache was behind: the object is current
	}
	c.log.Info("deleting stale nodeipam: it belongs to a previous Node of this name, not yet garbage collected; "+
		"reusing it would hand the new node its predecessor's blocks and release state (seed 003); "+
		"its blocks stay reserved until the new node's agent has reported on the replacement",
		"nodeipam", s.name, "uid", s.uid, "owner_uid", s.owner, "node_uid", n.UID, "blocks", s.blocks)
	err = c.c.lockstep.NodeIPAMs().Delete(ctx, s.name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(s.uid))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // already gone, or replaced: the UID precondition protected the replacement
	}
	if err != nil {
		return fmt.Errorf("delete stale nodeipam %s: %w", s.name, err)
	}
	if len(s.blocks) > 0 {
		c.reserved[s.name] = reservation{nodeUID: n.UID, blocks: s.blocks}
	}
	return nil
}

// create creates a Node's NodeIPAM, empty: blocks are added only through
// the pool ledger (assignFrom).
func (c *controller) create(ctx context.Context, n *v1alpha1.NodeIPAM) error {
	out, err := c.c.lockstep.NodeIPAMs().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // another writer, or a stale object the next pass deletes
	}
	if err != nil {
		return fmt.Errorf("create nodeipam for node %s: %w", n.Name, err)
	}
	c.log.Info("created nodeipam", "nodeipam", out.Name, "uid", out.UID, "node_uid", n.OwnerReferences[0].UID)
	return nil
}

// updateSpec writes a handshake step. On a conflict it reads the object
// again and decides again: the agent may have answered, or another
// replica acted, in between. A step that drains a block is confirmed
// against the API server's IPPools first (confirmDrains).
func (c *controller) updateSpec(ctx context.Context, u specUpdate, in *input) error {
	ipams := c.c.lockstep.NodeIPAMs()
	next := &u
	for attempt := 1; ; attempt++ {
		var err error
		if next, in, err = c.confirmDrains(ctx, *next, in); err != nil || next == nil {
			return err
		}
		out, err := ipams.Update(ctx, next.new, metav1.UpdateOptions{})
		if err == nil {
			for _, ch := range next.changes {
				c.log.Info(string(ch.action)+" block", "nodeipam", out.Name, "block", ch.cidr, "generation", out.Generation, "why", ch.why)
			}
			c.ops.specWritten(next.old, next.changes)
			return nil
		}
		name := next.old.Name
		if !apierrors.IsConflict(err) || attempt >= maxAttempts {
			return fmt.Errorf("update nodeipam %s: %w", name, err)
		}
		fresh, err := ipams.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("update nodeipam %s: %w", name, err)
		}
		if fresh.UID != next.old.UID {
			return nil // replaced: the next pass plans for the new one
		}
		c.log.Debug("conflict; re-reading and deciding again", "nodeipam", name, "attempt", attempt)
		d := c.redecide(fresh, in)
		if d.spec == nil {
			return nil
		}
		nn := fresh.DeepCopy()
		nn.Spec = *d.spec
		next = &specUpdate{old: fresh, new: nn, changes: d.changes}
	}
}

// redecide decides again for n, read fresh, with the input of the plan it
// replaces and this replica's current timers, and keeps the timers it
// returns.
func (c *controller) redecide(n *v1alpha1.NodeIPAM, in *input) nodeDecision {
	again := *in
	again.timers = c.timers
	d := decideOne(n, &again)
	maps.DeleteFunc(c.timers, func(k timerKey, _ time.Time) bool { return k.uid == n.UID })
	for cidr, t := range d.timers {
		c.timers[timerKey{n.UID, cidr}] = t
	}
	return d
}

// updatePoolStatus writes an IPPool's status, re-reading and re-planning
// on a conflict.
func (c *controller) updatePoolStatus(ctx context.Context, pool *v1alpha1.IPPool, in *input) error {
	pools := c.c.lockstep.IPPools()
	for attempt := 1; ; attempt++ {
		_, err := pools.UpdateStatus(ctx, pool, metav1.UpdateOptions{})
		if err == nil {
			c.log.Debug("updated ippool status", "ippool", pool.Name, "allocated_blocks", pool.Status.AllocatedBlocks)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= maxAttempts {
			return fmt.Errorf("update ippool %s status: %w", pool.Name, err)
		}
		fresh, err := pools.Get(ctx, pool.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("update ippool %s status: %w", pool.Name, err)
		}
		again := *in
		again.pools = slices.Clone(in.pools)
		for i, p := range again.pools {
			if p.Name == fresh.Name {
				again.pools[i] = fresh
			}
		}
		pool = nil
		for _, p := range planFor(&again).poolStatus {
			if p.Name == fresh.Name {
				pool = p
			}
		}
		if pool == nil {
			return nil
		}
	}
}
