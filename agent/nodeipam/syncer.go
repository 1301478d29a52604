package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// Defaults for Options.
const (
	// DefaultReportInterval is the shortest time between two usage
	// reports: at most one status write a second for allocations, however
	// many pods start. Handshake answers do not wait for it.
	DefaultReportInterval = time.Second
	// DefaultOrphanInterval is how often the orphan reconcile runs when
	// no pod deletion prompts it.
	DefaultOrphanInterval = time.Minute
)

const (
	// retryDelay is how long a failed status write or apply waits before
	// the next attempt.
	retryDelay = 2 * time.Second
	// syncProgress is how often Run says what it still waits for while
	// the informers have not synced.
	syncProgress = 10 * time.Second
)

// Options configures a Syncer.
type Options struct {
	// Config reaches the API server: client.InClusterConfig, or a
	// kubeconfig's.
	Config *client.Config
	// NodeName is the Node the agent runs on, and the name of its
	// NodeIPAM.
	NodeName string
	// Store is the agent's store; Service and DB must be the ones the
	// endpoints service was built on, the service with
	// endpoints.Config.PoolsFromStore.
	Store   *store.Store
	DB      *persist.DB
	Service *endpoints.Service
	Logger  *slog.Logger
	// ReportInterval is DefaultReportInterval when zero.
	ReportInterval time.Duration
	// OrphanInterval is DefaultOrphanInterval when zero.
	OrphanInterval time.Duration
	// Heartbeat, when set, is beaten by every turn of Run's loop, which
	// also turns on its Tick; waiting for the API server's first lists
	// beats it too. A pass that hangs silences it.
	Heartbeat *watchdog.Loop
}

// Syncer is the agent's half of cluster IPAM for one node; the package
// documentation describes what it does.
type Syncer struct {
	opts  Options
	log   *slog.Logger
	name  string
	ipams *client.Resource[*v1alpha1.NodeIPAM, *v1alpha1.NodeIPAMList]
	core  client.Interface

	nodeInf, ipamInf, podInf *client.Informer

	kick, kickOrphans chan struct{}
	ready             chan struct{}
	readyOnce         sync.Once
	running           atomic.Bool
	writes            atomic.Uint64
	reason            atomic.Pointer[string]
	pods              atomic.Pointer[endpoints.PodList]
	reapDue           atomic.Bool
	hooks             hooks

	// Owned by Run's goroutine.
	applied    appliedSpec
	fresh      *v1alpha1.NodeIPAM
	superseded map[string]bool
	lastWrite  time.Time
	retryAt    time.Time
	allocRev   uint64
	waiting    string
}

// appliedSpec is the NodeIPAM spec the store reflects.
type appliedSpec struct {
	uid        string
	generation int64
}

// nothingApplied is the appliedSpec once the store holds no block of any
// NodeIPAM but retired ones. The zero appliedSpec, before the first pass,
// is not it: blocks restored from the state file are given up too when no
// NodeIPAM is usable.
var nothingApplied = appliedSpec{generation: -1}

// hooks let tests stop the Syncer at the points the seed races happen.
// All are nil outside tests.
type hooks struct {
	// afterRead runs when a pass has read a verified NodeIPAM, before it
	// applies it.
	afterRead func(*v1alpha1.NodeIPAM)
	// inApplyTxn runs inside the apply transaction of obj (nil when no
	// NodeIPAM is usable), after every decision and before the commit.
	inApplyTxn func(obj *v1alpha1.NodeIPAM)
	// beforeAnswer runs after the apply committed and before a status
	// write that changes an answer or observedGeneration; an error
	// abandons the pass, as a crash at that point would.
	beforeAnswer func(context.Context, *v1alpha1.NodeIPAM) error
	// waiting runs when the Syncer starts waiting for a usable NodeIPAM.
	waiting func(reason string)
	// afterPodList runs in the orphan reconcile between the consistent
	// pod list and the release it judges.
	afterPodList func()
}

// New returns a Syncer for the node opts.NodeName and loads the blocks of
// the state file into the store, each draining until Run verifies the
// NodeIPAM that assigns it. Call it after endpoints.New and before the
// agent serves ADDs.
func New(opts Options) (*Syncer, error) {
	switch {
	case opts.Config == nil:
		return nil, errors.New("create nodeipam syncer: no API server configuration")
	case opts.NodeName == "":
		return nil, errors.New("create nodeipam syncer: no node name (set NODE_NAME from the pod's spec.nodeName)")
	case opts.Store == nil || opts.DB == nil || opts.Service == nil:
		return nil, errors.New("create nodeipam syncer: store, state file and endpoints service are all needed")
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = DefaultReportInterval
	}
	if opts.OrphanInterval <= 0 {
		opts.OrphanInterval = DefaultOrphanInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	lc, err := client.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	core, err := client.ForGroup(opts.Config, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	blocks, err := opts.DB.LoadBlocks()
	if err != nil {
		return nil, err
	}
	if err := loadBlocks(opts.Store, blocks); err != nil {
		return nil, fmt.Errorf("restore blocks from %s: %w", opts.DB.Path(), err)
	}
	s := &Syncer{
		opts: opts, log: opts.Logger.With("node", opts.NodeName), name: opts.NodeName,
		ipams: lc.NodeIPAMs(), core: core,
		kick: make(chan struct{}, 1), kickOrphans: make(chan struct{}, 1), ready: make(chan struct{}),
		superseded: map[string]bool{},
	}
	if len(blocks) > 0 {
		s.log.Info("restored address blocks from the state file; none is allocated from until the NodeIPAM confirms it",
			"count", len(blocks), "file", opts.DB.Path())
	}
	s.setReason("the agent has not read its Node and NodeIPAM yet")
	s.nodeInf = client.NewInformer(coreListWatch(core, "nodes", nodeSelector(s.name)), s.log)
	s.ipamInf = client.NewInformer(s.ipams.ListWatchName(s.name), s.log)
	s.podInf = client.NewInformer(coreListWatch(core, "pods", podSelector(s.name)), s.log)
	s.podInf.SetTransform(client.SlimPod)
	poke := func(client.Object) { s.poke(s.kick) }
	for _, inf := range []*client.Informer{s.nodeInf, s.ipamInf} {
		inf.AddHandler(client.Handler{
			Add: poke, Delete: poke, Update: func(_, o client.Object) { poke(o) },
		})
	}
	s.podInf.AddHandler(client.Handler{
		// A pod going, or one reaching Running with its addresses, may
		// leave an endpoint orphaned.
		Delete: func(client.Object) { s.poke(s.kickOrphans) },
		Update: func(_, o client.Object) { s.poke(s.kickOrphans) },
	})
	return s, nil
}

// Writes returns how many status writes the Syncer has sent to the API
// server, conflicts and failures included.
func (s *Syncer) Writes() uint64 { return s.writes.Load() }

// WaitReady returns once the store holds the blocks of a NodeIPAM verified
// to be this node's, or with an error saying what the Syncer is waiting
// for when ctx ends first. Run must be running.
func (s *Syncer) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the address blocks of node %s: %s: %w", s.name, *s.reason.Load(), ctx.Err())
	}
}

// Run keeps the store's blocks in step with the node's NodeIPAM, answers
// release marks, reports usage and reconciles orphaned endpoints until ctx
// ends; it then returns nil. A missing or stale NodeIPAM, or an API server
// that does not answer, is waited out (and logged), never an error. Run
// may be called once.
func (s *Syncer) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("run nodeipam syncer: already running")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, inf := range []*client.Informer{s.nodeInf, s.ipamInf, s.podInf} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.Run(ctx)
		}()
	}
	if !s.waitSynced(ctx) {
		return nil
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.runOrphans(ctx)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.opts.Heartbeat.Beat()
		// Watch allocations before the pass reads them, so a change
		// during the pass wakes the next one.
		changed := s.allocationsChanged()
		next := s.pass(ctx)
		var due <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-changed:
		case <-due:
		case <-s.opts.Heartbeat.Tick():
		}
		timer.Stop()
	}
}

// waitSynced waits for the informers' first lists, saying every
// syncProgress what it waits for. It returns false when ctx ended first.
func (s *Syncer) waitSynced(ctx context.Context) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	lastSaid := start
	for {
		s.opts.Heartbeat.Beat()
		if s.nodeInf.HasSynced() && s.ipamInf.HasSynced() && s.podInf.HasSynced() {
			return true
		}
		if time.Since(lastSaid) >= syncProgress {
			lastSaid = time.Now()
			s.log.Warn("still waiting for the API server to list this node, its NodeIPAM and its pods",
				"waited", time.Since(start).Round(time.Second), "node", s.nodeInf.HasSynced(),
				"nodeipam", s.ipamInf.HasSynced(), "pods", s.podInf.HasSynced())
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// allocationsChanged returns a channel closed by the next commit that
// changes the allocations table (and, rarely, by an unrelated one).
func (s *Syncer) allocationsChanged() <-chan struct{} {
	txn := s.opts.Store.ReadTxn()
	ch, rev, err := store.WatchRevision(txn, store.TableAllocations)
	if err != nil {
		return nil
	}
	if rev != 0 {
		s.allocRevSeen(rev)
	}
	return ch
}

func (s *Syncer) allocRevSeen(rev uint64) {
	if rev != s.allocRev && s.hasIrregularBlocks() {
		s.reapDue.Store(true)
	}
	s.allocRev = rev
}

// hasIrregularBlocks reports whether a block waits for its addresses to go
// (retired) or for another block to go (overlapping): an allocation change
// may let the next apply settle it.
func (s *Syncer) hasIrregularBlocks() bool {
	rows, err := store.Blocks(s.opts.Store.ReadTxn(), nil)
	if err != nil {
		return true
	}
	for _, b := range rows {
		if b.State == store.BlockRetired || b.State == store.BlockOverlapping {
			return true
		}
	}
	return false
}

// poke wakes the loop listening on ch without blocking.
func (s *Syncer) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pass brings the store and the NodeIPAM's status up to date once. It
// returns when it wants to run again even if nothing changes (a usage
// report waiting for its interval, a retry), or the zero time.
func (s *Syncer) pass(ctx context.Context) time.Time {
	obj := s.pick()
	if why := s.unusable(obj); why != "" {
		s.wait(why)
		// Blocks of a NodeIPAM that is not (or no longer) this node's
		// are given up, once, and again whenever that may free one.
		if s.applied != nothingApplied || s.reapDue.Swap(false) {
			if err := s.apply(nil, why); err != nil {
				s.log.Error("give up the blocks of an unusable NodeIPAM", "err", err)
				return time.Now().Add(retryDelay)
			}
			s.applied = nothingApplied
		}
		return time.Time{}
	}
	s.waiting = ""
	if s.hooks.afterRead != nil {
		s.hooks.afterRead(obj)
	}
	if string(obj.UID) == s.applied.uid && obj.Generation < s.applied.generation {
		return time.Time{} // an older copy than the one applied: wait for the informer
	}
	if string(obj.UID) != s.applied.uid || obj.Generation != s.applied.generation || s.reapDue.Swap(false) {
		if err := s.apply(obj, ""); err != nil {
			s.log.Error("apply NodeIPAM to the store", "generation", obj.Generation, "err", err)
			return time.Now().Add(retryDelay)
		}
	}
	if !s.readyDone() && s.holdsBlocksOf(string(obj.UID)) {
		s.readyOnce.Do(func() { close(s.ready) })
	}
	return s.report(ctx, obj)
}

func (s *Syncer) readyDone() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// holdsBlocksOf reports whether the store holds a block the NodeIPAM with
// UID uid assigned.
func (s *Syncer) holdsBlocksOf(uid string) bool {
	rows, err := store.Blocks(s.opts.Store.ReadTxn(), nil)
	if err != nil {
		return false
	}
	for _, b := range rows {
		if b.Owner == uid && b.State != store.BlockRetired {
			return true
		}
	}
	return false
}

// pick returns the newest NodeIPAM the Syncer knows of: the informer's,
// unless the informer still shows a version the Syncer has itself
// replaced (by a status write) or seen refused (by a conflict), in which
// case the copy the API server returned since.
func (s *Syncer) pick() *v1alpha1.NodeIPAM {
	raw, ok := s.ipamInf.Get(s.name)
	if !ok {
		s.fresh = nil
		return nil
	}
	cached := raw.(*v1alpha1.NodeIPAM)
	if s.fresh != nil && s.superseded[cached.ResourceVersion] && s.fresh.UID == cached.UID {
		return s.fresh
	}
	s.fresh = nil
	if len(s.superseded) > 64 {
		clear(s.superseded)
	}
	return cached
}

// unusable says why obj may not be used, or "" when it is this node's.
func (s *Syncer) unusable(obj *v1alpha1.NodeIPAM) string {
	raw, ok := s.nodeInf.Get(s.name)
	switch {
	case !ok:
		return fmt.Sprintf("Node %s does not exist; waiting for the kubelet to register it", s.name)
	case obj == nil:
		return fmt.Sprintf("NodeIPAM %s does not exist yet; the lockstep operator creates one for every Node (is it running?)", s.name)
	case obj.DeletionTimestamp != nil:
		return fmt.Sprintf("NodeIPAM %s (uid %s) is being deleted; waiting for the operator to create its successor", s.name, obj.UID)
	}
	node := raw.(*corev1.Node)
	if !obj.ControlledBy(node.UID) {
		owner := "none"
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
			owner = fmt.Sprintf("%s %s uid %s", ref.Kind, ref.Name, ref.UID)
		}
		return fmt.Sprintf("NodeIPAM %s (uid %s) is controlled by %s, not by this Node (uid %s): it is left over from a "+
			"deleted Node of the same name and awaits garbage collection; the agent ignores it and waits for the operator to replace it",
			s.name, obj.UID, owner, node.UID)
	}
	return ""
}

// wait records why the Syncer waits, and says so once per reason.
func (s *Syncer) wait(why string) {
	if why == s.waiting {
		return
	}
	s.waiting = why
	s.setReason(why)
	s.log.Warn("not allocating from any block of the NodeIPAM", "why", why)
	if s.hooks.waiting != nil {
		s.hooks.waiting(why)
	}
}

func (s *Syncer) setReason(why string) { s.reason.Store(&why) }

// apply runs applyTxn for obj (nil: nothing is assigned, because of why)
// and commits it durably.
func (s *Syncer) apply(obj *v1alpha1.NodeIPAM, why string) error {
	var a *assignment
	var events []event
	if obj != nil {
		a, events = assignmentOf(obj)
	}
	txn := s.opts.Store.WriteTxn()
	defer txn.Abort()
	more, err := applyTxn(txn, s.opts.Service, a, s.pods.Load(), why)
	if err != nil {
		return err
	}
	if s.hooks.inApplyTxn != nil {
		s.hooks.inApplyTxn(obj)
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	for _, e := range append(events, more...) {
		s.log.Log(context.Background(), e.level, e.msg, e.args...)
	}
	if obj != nil {
		if string(obj.UID) != s.applied.uid {
			s.log.Info("using NodeIPAM", "uid", obj.UID, "generation", obj.Generation, "blocks", len(a.blocks))
		}
		s.applied = appliedSpec{uid: string(obj.UID), generation: obj.Generation}
	}
	return nil
}

// report writes obj's status when the agent owes a change: at once for an
// answer or observedGeneration, at most once per ReportInterval for usage.
func (s *Syncer) report(ctx context.Context, obj *v1alpha1.NodeIPAM) time.Time {
	now := time.Now()
	want, err := statusOf(s.opts.Store.ReadTxn(), obj, metav1.NewTime(now))
	if err != nil {
		s.log.Error("compute NodeIPAM status", "err", err)
		return now.Add(retryDelay)
	}
	urgent := answersChanged(obj.Status, want)
	if !urgent && !usageChanged(obj.Status, want) {
		return time.Time{}
	}
	if now.Before(s.retryAt) {
		return s.retryAt
	}
	if due := s.lastWrite.Add(s.opts.ReportInterval); !urgent && now.Before(due) {
		return due
	}
	if urgent && s.hooks.beforeAnswer != nil {
		if err := s.hooks.beforeAnswer(ctx, obj); err != nil {
			return time.Time{}
		}
	}
	out := obj.DeepCopy()
	out.Status = want
	out.Status.LastReportTime = &metav1.Time{Time: now}
	s.writes.Add(1)
	res, err := s.ipams.UpdateStatus(ctx, out, metav1.UpdateOptions{})
	switch {
	case err == nil:
		s.superseded[obj.ResourceVersion] = true
		s.fresh, s.lastWrite, s.retryAt = res, now, time.Time{}
		if urgent {
			s.log.Debug("answered NodeIPAM", "generation", obj.Generation, "releases", want.Releases)
			for _, a := range want.Releases {
				if was := obj.Status.Answer(a.CIDR); a.State == v1alpha1.ReadyForRelease && obj.Spec.Draining(a.CIDR) &&
					(was == nil || was.State != v1alpha1.ReadyForRelease) {
					s.log.Info("drained block is empty: answered ready-for-release", "block", a.CIDR, "generation", obj.Generation)
				}
			}
		}
		return time.Time{}
	case apierrors.IsConflict(err):
		// The operator changed the object since it was read: read it
		// again, apply what changed, decide again.
		s.superseded[obj.ResourceVersion] = true
		fresh, gerr := s.ipams.Get(ctx, s.name, metav1.GetOptions{})
		if gerr != nil {
			s.retryAt = now.Add(retryDelay)
			return s.retryAt
		}
		s.fresh = fresh
		s.poke(s.kick)
		return time.Time{}
	case ctx.Err() != nil:
		return time.Time{}
	default:
		s.log.Warn("write NodeIPAM status; ADDs go on, the report is retried", "err", err, "retry", retryDelay)
		s.retryAt = now.Add(retryDelay)
		return s.retryAt
	}
}
