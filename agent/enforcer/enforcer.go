package enforcer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/backoff"
	"lockstep.dev/lockstep/internal/watchdog"
)

// Dataplane is what enforces the compiled state on the node: the eBPF
// programs, and in later backends iptables/ipset or HNS. Implementations
// are driven only by an Enforcer and need no locking of their own.
type Dataplane interface {
	// Attach starts enforcing on the host side of a pod's veth. It is
	// idempotent.
	Attach(hostIf string) error
	// Detach stops enforcing on hostIf; a link that no longer exists is not
	// an error.
	Detach(hostIf string) error
	// Apply makes d the enforced state in one step: packets see either the
	// previous state or d, never a mix.
	Apply(d *policy.Desired) error
}

// Invalidator is implemented by dataplanes that remember what they applied
// and diff against it (eBPF, iptables, HNS): Invalidate makes the next Apply read
// the real state back, so that a resync repairs drift made behind
// lockstep's back instead of finding nothing to do.
type Invalidator interface {
	Invalidate()
}

// AttachChecker is implemented by dataplanes whose hooks on an endpoint's
// interface someone else can remove (the eBPF filters: `tc filter del`
// needs only CAP_NET_ADMIN on the node): Attached reports whether hostIf
// still has them. The resync asks for every attached endpoint still Ready
// as the ADD it was attached for wired it, and attaches again what is
// missing: until then the endpoint is not enforced. (The apply after the
// resync detaches a released endpoint and attaches a re-wired one.)
type AttachChecker interface {
	Attached(hostIf string) (bool, error)
}

// ErrNotEnforced: Sync finished but the endpoint is not enforced, e.g. its
// host link vanished before it could be attached.
var ErrNotEnforced = errors.New("endpoint not enforced")

// Enforcer applies committed store state to a Dataplane.
type Enforcer struct {
	store *store.Store
	dp    Dataplane
	log   *slog.Logger

	mu      sync.Mutex // serialises applies: one snapshot at a time
	applied uint64     // store revision last applied
	// attached maps each attached host interface to the OpID of the
	// endpoint it was attached for: another ADD of the same attachment
	// makes the host link anew under the same name, and its endpoint
	// must be attached again (see apply).
	attached map[string]uint64
	lastErr  error
	// feed keeps the incremental compiler in step with the store.
	feed feeder
	// last is the state last applied, and force makes the next apply call
	// the dataplane even if the compiled state is last (a resync).
	last  *policy.Desired
	force bool
	// services counts the Service frontends and backends of the state
	// applied last, readable without waiting for an apply in progress.
	services atomic.Pointer[ServiceCounts]
	// failures is what the state applied last fails closed on, and
	// failuresOf the state it was read from.
	failures   atomic.Pointer[Failures]
	failuresOf *policy.Desired
	onFailures func(Failures)
	// reattached counts the endpoints a resync found without their hooks
	// (AttachChecker).
	reattached atomic.Uint64

	// observe, when set, receives the duration of every apply, and
	// observePhases its parts.
	observe       func(time.Duration)
	observePhases func(Phases)
	// heartbeat is beaten by every turn of Run.
	heartbeat *watchdog.Loop

	// releaseDelay is how long Run holds back a change that only
	// releases endpoints (see holdReleases); releasesHeld is when it
	// first held back the changes not yet applied, zero when it holds
	// none, and heldRev the latest revision it holds back. Under mu.
	releaseDelay time.Duration
	releasesHeld time.Time
	heldRev      uint64
}

// DefaultReleaseDelay is the release delay the agent gives the eBPF
// dataplane (see SetReleaseDelay).
const DefaultReleaseDelay = 100 * time.Millisecond

// Phases is how long the parts of one apply took.
type Phases struct {
	// Feed is handing the compiler what changed in the store since the
	// last apply (read from the store's change log), or every object.
	Feed time.Duration
	// Compile is the incremental compilation.
	Compile time.Duration
	// Apply is the dataplane's Apply, with attaching new endpoints and
	// detaching old ones; zero when the compiled state was the one
	// applied last (Skipped).
	Apply   time.Duration
	Skipped bool
}

// New returns an Enforcer for st and dp.
func New(st *store.Store, dp Dataplane, log *slog.Logger) *Enforcer {
	if log == nil {
		log = slog.Default()
	}
	e := &Enforcer{store: st, dp: dp, log: log, attached: map[string]uint64{}}
	e.feed.limits = policy.DefaultLimits
	return e
}

// SetReleaseDelay sets how long Run holds back a change that only
// releases endpoints (a CNI DEL, a GC, an orphan clean-up: Ready endpoints
// deleted) before it applies it on its own; 0, the default, applies every
// change at once. Call it before Run.
//
// Such a change only takes away pods that are gone from the node: their
// entries, their CNI addresses, and the rules that matched only them.
// Applying it with the next change instead saves that change a wait when
// the dataplane makes a change follow the previous one by a delay: an
// eBPF Apply writes the idle copy only once an RCU grace period (about 10
// ms here, at times over 20) has passed since the last flip, and the ADD
// that follows a DEL would find the DEL's flip a few milliseconds old.
// On this node, an address a release frees is handed out again only by an
// ADD, whose own apply (EnforceEndpoint) carries the release.
func (e *Enforcer) SetReleaseDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseDelay = max(d, 0)
}

// SetLimits replaces the limits on the namespaces' policies and Services
// (policy.DefaultLimits unless set); the next apply recompiles everything.
func (e *Enforcer) SetLimits(l policy.Limits) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.feed.limits = l
	e.feed.reset()
	e.applied = 0
}

// SetNode names the Node the agent runs on: a Service of
// internalTrafficPolicy Local translates this node's pods' connections to
// that Node's endpoints only (policy.Snapshot.Node), endpoints' node hints
// name it, and its row of the store's nodes table gives the zone their
// zone hints name (policy.Snapshot.Zone). Empty, the default, takes every
// endpoint as this node's, as the standalone agent does.
func (e *Enforcer) SetNode(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.feed.node = name
	e.feed.reset()
	e.applied = 0
}

// NodePorts chooses, among a Node's InternalIPs, the addresses on which
// pods' connections to its NodePorts are translated
// (policy.Snapshot.NodeAddrs), as kube-proxy's --nodeport-addresses
// chooses where it serves them. The zero value chooses all of them, as
// kube-proxy's iptables mode does by default (its every local address).
type NodePorts struct {
	// Primary chooses the node's primary addresses, as kube-proxy's
	// "primary" (the nftables mode's default) takes them: the first
	// address, and the first of the other family.
	Primary bool
	// Prefixes, when Primary is unset, choose the addresses within one of
	// them; none chooses all.
	Prefixes []netip.Prefix
}

// Addrs returns the addresses of addrs (a Node's InternalIPs, in its
// order) that n chooses, in their order.
func (n NodePorts) Addrs(addrs []netip.Addr) []netip.Addr {
	if !n.Primary && len(n.Prefixes) == 0 {
		return addrs
	}
	var out []netip.Addr
	for _, a := range addrs {
		var chosen bool
		if n.Primary {
			chosen = !slices.ContainsFunc(out, func(o netip.Addr) bool { return o.Is4() == a.Is4() })
		} else {
			chosen = slices.ContainsFunc(n.Prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
		}
		if chosen {
			out = append(out, a)
		}
	}
	return out
}

// SetNodePortAddresses chooses the addresses of the node (SetNode) on
// which pods' connections to its NodePorts are translated.
func (e *Enforcer) SetNodePortAddresses(n NodePorts) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n.Prefixes = slices.Clone(n.Prefixes)
	e.feed.nodePorts = n
	e.feed.reset()
	e.applied = 0
}

// OnApply registers fn to observe how long each apply took.
func (e *Enforcer) OnApply(fn func(time.Duration)) { e.observe = fn }

// OnPhases registers fn to observe how long the parts of each apply took.
func (e *Enforcer) OnPhases(fn func(Phases)) { e.observePhases = fn }

// SetHeartbeat makes Run beat hb on every turn, and turn on hb's Tick when
// idle; call it before Run. Every turn takes the apply lock, to apply or
// to decide to hold a release back, so an apply that hangs, or anyone
// holding the apply lock, silences hb.
func (e *Enforcer) SetHeartbeat(hb *watchdog.Loop) { e.heartbeat = hb }

// Sync applies the latest committed state, unless it is already applied,
// and returns once it is in force.
func (e *Enforcer) Sync(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.syncLocked(ctx)
}

// EnforceEndpoint returns once the state of store revision rev, or a
// newer one, is in force, with hostIf enforced in it (ErrNotEnforced if
// it is not). A CNI ADD calls it with the revision its confirm committed
// as: one apply serves every ADD confirmed before it began, so a burst of
// ADDs shares a few applies rather than taking the apply lock for one
// each, and the answer is read under the same hold of the lock as the
// apply, not behind the next apply of another ADD.
func (e *Enforcer) EnforceEndpoint(ctx context.Context, hostIf string, rev uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	applied := false
	if e.applied < rev || e.lastErr != nil {
		if err := e.syncLocked(ctx); err != nil {
			return err
		}
		applied = true
	}
	if _, ok := e.attached[hostIf]; !ok && !applied {
		// The apply that covered rev could not attach hostIf (an attach
		// that fails leaves its endpoint out of the apply): try again
		// with the latest state, even if nothing was committed since.
		e.applied = 0
		if err := e.syncLocked(ctx); err != nil {
			return err
		}
	}
	if _, ok := e.attached[hostIf]; !ok {
		return fmt.Errorf("%s: %w", hostIf, ErrNotEnforced)
	}
	return nil
}

// syncLocked is Sync, called with e.mu held.
func (e *Enforcer) syncLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	txn := e.store.ReadTxn()
	rev := store.Revision(txn, "")
	if rev == e.applied && e.lastErr == nil {
		return nil
	}
	start := time.Now()
	e.releasesHeld = time.Time{}
	err := e.apply(txn)
	e.lastErr = err
	if err != nil {
		return err
	}
	e.applied = rev
	if e.observe != nil {
		e.observe(time.Since(start))
	}
	return nil
}

// Resync applies the latest committed state even if nothing changed in the
// store: it repairs drift in the dataplane (entries changed behind
// lockstep's back, and, with an AttachChecker, endpoints whose hooks were
// removed, which it attaches again). It also recompiles from the whole
// store rather than from what changed, so that state the incremental
// compiler carries between applies is rebuilt from scratch periodically.
// It takes the same lock as Sync.
func (e *Enforcer) Resync(ctx context.Context) error {
	e.mu.Lock()
	e.applied = 0
	e.force = true
	e.feed.reset()
	if inv, ok := e.dp.(Invalidator); ok {
		inv.Invalidate()
	}
	e.recheckAttached(e.store.ReadTxn())
	e.mu.Unlock()
	return e.Sync(ctx)
}

// recheckAttached forgets the attached endpoints whose hooks the dataplane
// no longer has, so that the apply that follows attaches them again. It
// checks those still Ready in txn as the ADD that was attached wired
// them; an endpoint it cannot check (its link may be on its way out)
// stays as it is. Called with e.mu held.
func (e *Enforcer) recheckAttached(txn *store.Txn) {
	c, ok := e.dp.(AttachChecker)
	if !ok {
		return
	}
	ops, err := readyOpIDs(txn)
	if err != nil {
		e.log.Warn("check the hooks of the endpoints; leaving them as they are", "err", err)
		return
	}
	for hostIf, op := range e.attached {
		if now, ok := ops[hostIf]; !ok || now != op {
			// Released or wired anew since it was attached (a release
			// held back, an ADD in progress): its link may be gone or a
			// new one. The apply that follows detaches or attaches it.
			continue
		}
		ok, err := c.Attached(hostIf)
		if err != nil {
			e.log.Warn("check the hooks of an endpoint; leaving it as it is", "if", hostIf, "err", err)
			continue
		}
		if !ok {
			e.log.Warn("the hooks of an endpoint were removed behind lockstep's back: it was not enforced; attaching them again", "if", hostIf)
			delete(e.attached, hostIf)
			e.reattached.Add(1)
		}
	}
}

// Reattached counts the endpoints resyncs found without their hooks and
// attached again, since the Enforcer was made.
func (e *Enforcer) Reattached() uint64 { return e.reattached.Load() }

// Enforced reports whether hostIf is attached as of the last apply.
func (e *Enforcer) Enforced(hostIf string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.attached[hostIf]
	return ok
}

// LastError is the error of the last apply, nil when it succeeded.
func (e *Enforcer) LastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

// Run applies every committed change until ctx ends, retrying a failed
// apply with backoff, and resyncs every resync interval (0 disables). A
// change that only releases endpoints waits up to the release delay for
// the next change (SetReleaseDelay).
func (e *Enforcer) Run(ctx context.Context, resync time.Duration) {
	retry := backoff.Backoff{First: 100 * time.Millisecond, Max: 5 * time.Second}
	var tick <-chan time.Time
	if resync > 0 {
		t := time.NewTicker(resync)
		defer t.Stop()
		tick = t.C
	}
	for {
		e.heartbeat.Beat()
		ws := memdb.NewWatchSet()
		txn := e.store.ReadTxn()
		ch, _, err := store.WatchRevision(txn, "")
		if err == nil {
			ws.Add(ch)
		}
		if hold := e.holdReleases(txn); hold > 0 {
			if !e.waitHeld(ctx, ws, hold) {
				return
			}
			continue
		}
		if err := e.Sync(ctx); err != nil && ctx.Err() == nil {
			wait := retry.Next(time.Now())
			e.log.Error("apply dataplane state; retrying", "err", err, "in", wait)
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		retry.Reset()
		select {
		case <-ctx.Done():
			return
		case <-ws.WatchCh(ctx):
		case <-e.heartbeat.Tick():
		case <-tick:
			if err := e.Resync(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("resync dataplane state", "err", err)
			}
		}
	}
}

// waitHeld waits while Run holds back releases: for hold, a newer change
// or a heartbeat tick, whichever comes first. It returns false when ctx
// ended.
func (e *Enforcer) waitHeld(ctx context.Context, ws memdb.WatchSet, hold time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	select {
	case <-ws.WatchCh(wctx): // a newer change, or hold is over
	case <-e.heartbeat.Tick():
	}
	return ctx.Err() == nil
}

// readyOpIDs returns the OpID of every Ready endpoint, by host interface:
// which ADD wired it last.
func readyOpIDs(txn *store.Txn) (map[string]uint64, error) {
	eps, err := store.EndpointsByState(txn, nil, store.EndpointReady)
	if err != nil {
		return nil, fmt.Errorf("read ready endpoints: %w", err)
	}
	out := make(map[string]uint64, len(eps))
	for _, ep := range eps {
		out[ep.HostIfName] = ep.OpID
	}
	return out, nil
}

// pendingOn reports whether an endpoint on host interface hostIf is
// Pending in txn: an ADD is wiring it.
func pendingOn(txn *store.Txn, hostIf string) bool {
	ep, err := store.EndpointByHostIf(txn, nil, hostIf)
	return err == nil && ep != nil && ep.State == store.EndpointPending
}

// holdReleases returns how much longer Run should hold back the changes
// txn reads that are not applied yet: the rest of the release delay when
// they only release endpoints, zero when they should be applied now.
func (e *Enforcer) holdReleases(txn *store.Txn) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	rev := store.Revision(txn, "")
	if e.releaseDelay == 0 || e.lastErr != nil || e.force || e.applied == 0 || rev == e.applied {
		e.releasesHeld = time.Time{}
		return 0
	}
	changes, err := store.ChangesSince(txn, e.applied)
	if err != nil || !onlyReleases(changes) {
		e.releasesHeld = time.Time{}
		return 0
	}
	now := time.Now()
	if e.releasesHeld.IsZero() {
		e.releasesHeld = now
	}
	e.heldRev = rev
	return e.releasesHeld.Add(e.releaseDelay).Sub(now)
}

// apply compiles the state txn reads and applies it: new endpoints are
// attached first, then the state is applied in one step, then endpoints
// that are gone are detached. The compiler is incremental: it is fed only
// what changed since the last apply (see feeder). When the compiled state
// is the one last applied (a change that does not concern this node), the
// dataplane is left alone.
func (e *Enforcer) apply(txn *store.Txn) error {
	var ph Phases
	start := time.Now()
	if err := e.feed.feed(txn); err != nil {
		return fmt.Errorf("read policy inputs: %w", err)
	}
	fed := time.Now()
	desired, err := e.feed.comp.Compile()
	if err != nil {
		return fmt.Errorf("compile policy: %w", err)
	}
	compiled := time.Now()
	ph.Feed, ph.Compile = fed.Sub(start), compiled.Sub(fed)
	defer func() {
		ph.Apply = time.Since(compiled)
		if e.observePhases != nil {
			e.observePhases(ph)
		}
	}()
	ops := e.feed.localOps // read by feed from txn
	endpoints := desired.Endpoints
	rewired := false
	for hostIf := range desired.Endpoints {
		op := ops[hostIf]
		was, ok := e.attached[hostIf]
		if ok && was == op {
			continue
		}
		// A new endpoint, or one another ADD of its attachment wired
		// anew since it was attached: its host link is a new one, under
		// the same name, without the filters.
		rewired = rewired || ok
		if err := e.dp.Attach(hostIf); err != nil {
			// The link may be gone already (a DEL is on its way); do not let
			// one pod block every other pod's policy. desired is shared
			// with the compiler: leave it out of a copy.
			e.log.Warn("attach endpoint; leaving it out of this apply", "if", hostIf, "err", err)
			if sameMap(endpoints, desired.Endpoints) {
				endpoints = maps.Clone(desired.Endpoints)
			}
			delete(endpoints, hostIf)
			continue
		}
		e.attached[hostIf] = op
	}
	if !sameMap(endpoints, desired.Endpoints) {
		d := *desired
		d.Endpoints = endpoints
		desired = &d
	}
	// A re-attached endpoint has a new ifindex: the dataplane must write
	// its state there even if the compiled state is the last one.
	ph.Skipped = !e.force && !rewired && sameDesired(desired, e.last)
	if !ph.Skipped {
		if err := e.dp.Apply(desired); err != nil {
			e.last = nil
			return fmt.Errorf("apply dataplane state: %w", err)
		}
		e.last, e.force = desired, false
		e.services.Store(countServices(desired))
	}
	e.noteFailures(desired)
	for hostIf := range e.attached {
		if _, ok := desired.Endpoints[hostIf]; ok {
			continue
		}
		if pendingOn(txn, hostIf) {
			// Another ADD is wiring the endpoint anew: the old link, still
			// up until that ADD deletes it, keeps the filters and, with
			// no state of its own any more, drops new connections rather
			// than passing everything. The ADD's confirm attaches the new
			// link (another OpID); an ADD rolled back deletes the
			// endpoint, and the next apply detaches it.
			continue
		}
		if err := e.dp.Detach(hostIf); err != nil {
			e.log.Warn("detach endpoint", "if", hostIf, "err", err)
		}
		delete(e.attached, hostIf)
	}
	return nil
}

// ServiceCounts is the size of the Service translation last applied.
type ServiceCounts struct {
	// Frontends are the ClusterIP, port and protocol triples translated.
	Frontends int
	// Backends are the endpoints of all of them; a backend of two
	// frontends counts twice.
	Backends int
	// NoBackends are the frontends without a ready endpoint, whose new
	// connections are refused.
	NoBackends int
	// NoLocalBackends are the frontends whose ready endpoints are all on
	// other nodes under internalTrafficPolicy Local, whose new
	// connections from this node's pods are dropped.
	NoLocalBackends int
}

// Services reports the Service translation of the state last applied; zero
// before the first apply. It does not wait for an apply in progress.
func (e *Enforcer) Services() ServiceCounts {
	if c := e.services.Load(); c != nil {
		return *c
	}
	return ServiceCounts{}
}

func countServices(d *policy.Desired) *ServiceCounts {
	c := &ServiceCounts{Frontends: len(d.Services)}
	for _, ent := range d.Services {
		c.Backends += len(ent.Backends)
		switch {
		case ent.NoLocalBackend:
			c.NoLocalBackends++
		case len(ent.Backends) == 0:
			c.NoBackends++
		}
	}
	return c
}

// sameDesired reports whether a and b are made of the same maps, which an
// incremental compiler returns when nothing in them changed.
func sameDesired(a, b *policy.Desired) bool {
	return a != nil && b != nil && sameMap(a.Addrs, b.Addrs) && sameMap(a.CIDRs, b.CIDRs) && sameMap(a.Endpoints, b.Endpoints) &&
		sameMap(a.Services, b.Services)
}

// sameMap reports whether a and b are the same map object.
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// SnapshotFor is Snapshot as the enforcer of node (SetNode) compiles it:
// with the Node, and its zone as the store holds it, and its addresses
// that nodePorts chooses (SetNodePortAddresses).
func SnapshotFor(txn *store.Txn, node string, nodePorts NodePorts) (*policy.Snapshot, error) {
	snap, err := Snapshot(txn)
	if err != nil {
		return nil, err
	}
	snap.Node = node
	if node == "" {
		return snap, nil
	}
	n, err := store.NodeByName(txn, nil, node)
	if err != nil {
		return nil, err
	}
	if n != nil {
		snap.Zone, snap.NodeAddrs = n.Zone, nodePorts.Addrs(n.Addrs)
	}
	return snap, nil
}

// Snapshot builds the full compiler's input from one store read
// transaction, with the default limits: local endpoints are the Ready
// ones; a local pod's addresses come from its endpoint, remote pods' from
// their status. The enforcer itself feeds an incremental compiler the same
// objects (see feeder); [policy.Compile] of a Snapshot with the Node
// SetNode gave, its zone and its addresses that the NodePorts given to
// SetNodePortAddresses choose (SnapshotFor), and the limits SetLimits gave,
// is the reference its result must equal.
func Snapshot(txn *store.Txn) (*policy.Snapshot, error) {
	snap := &policy.Snapshot{Namespaces: map[string]*policyapi.Namespace{}, Identities: map[string]policyapi.Peer{}, Limits: policy.DefaultLimits}
	nss, err := store.Namespaces(txn, nil)
	if err != nil {
		return nil, err
	}
	for _, ns := range nss {
		snap.Namespaces[ns.Name] = ns
	}
	ids, err := store.Identities(txn, nil)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		snap.Identities[id.Key] = id.ID
	}
	if snap.Policies, err = store.Policies(txn, nil); err != nil {
		return nil, err
	}
	local, localAddrs, _, err := localEndpoints(txn)
	if err != nil {
		return nil, err
	}
	snap.Local = local
	pods, err := store.Pods(txn, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if addrs, ok := localAddrs[podRef{p.Namespace, p.Name}]; ok {
			p = withAddrs(p, addrs)
		}
		snap.Pods = append(snap.Pods, p)
	}
	if snap.Services, err = store.Services(txn, nil); err != nil {
		return nil, err
	}
	if snap.EndpointSlices, err = store.EndpointSlices(txn, nil); err != nil {
		return nil, err
	}
	return snap, nil
}
