package enforcer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/agent/store"
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

// ErrNotEnforced: Sync finished but the endpoint is not enforced, e.g. its
// host link vanished before it could be attached.
var ErrNotEnforced = errors.New("endpoint not enforced")

// Enforcer applies committed store state to a Dataplane.
type Enforcer struct {
	store *store.Store
	dp    Dataplane
	log   *slog.Logger

	mu       sync.Mutex // serialises applies: one snapshot at a time
	applied  uint64     // store revision last applied
	attached map[string]bool
	lastErr  error

	// observe, when set, receives the duration of every apply.
	observe func(time.Duration)
}

// New returns an Enforcer for st and dp.
func New(st *store.Store, dp Dataplane, log *slog.Logger) *Enforcer {
	if log == nil {
		log = slog.Default()
	}
	return &Enforcer{store: st, dp: dp, log: log, attached: map[string]bool{}}
}

// OnApply registers fn to observe how long each apply took.
func (e *Enforcer) OnApply(fn func(time.Duration)) { e.observe = fn }

// Sync applies the latest committed state, unless it is already applied,
// and returns once it is in force.
func (e *Enforcer) Sync(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	txn := e.store.ReadTxn()
	rev := store.Revision(txn, "")
	if rev == e.applied && e.lastErr == nil {
		return nil
	}
	start := time.Now()
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
// lockstep's back). It takes the same lock as Sync.
func (e *Enforcer) Resync(ctx context.Context) error {
	e.mu.Lock()
	e.applied = 0
	e.mu.Unlock()
	return e.Sync(ctx)
}

// Enforced reports whether hostIf is attached as of the last apply.
func (e *Enforcer) Enforced(hostIf string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.attached[hostIf]
}

// LastError is the error of the last apply, nil when it succeeded.
func (e *Enforcer) LastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

// Run applies every committed change until ctx ends, retrying a failed
// apply with backoff, and resyncs every resync interval (0 disables).
func (e *Enforcer) Run(ctx context.Context, resync time.Duration) {
	backoff := 100 * time.Millisecond
	var tick <-chan time.Time
	if resync > 0 {
		t := time.NewTicker(resync)
		defer t.Stop()
		tick = t.C
	}
	for {
		ws := memdb.NewWatchSet()
		txn := e.store.ReadTxn()
		ch, _, err := txn.FirstWatch(store.TableRevisions, store.IndexID, "")
		if err == nil {
			ws.Add(ch)
		}
		if err := e.Sync(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("apply dataplane state; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-ws.WatchCh(ctx):
		case <-tick:
			if err := e.Resync(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("resync dataplane state", "err", err)
			}
		}
	}
}

// apply compiles the snapshot txn and applies it: new endpoints are
// attached first, then the state is applied in one step, then endpoints
// that are gone are detached.
func (e *Enforcer) apply(txn *store.Txn) error {
	snap, err := Snapshot(txn)
	if err != nil {
		return err
	}
	desired, err := policy.Compile(snap)
	if err != nil {
		return fmt.Errorf("compile policy: %w", err)
	}
	for hostIf := range desired.Endpoints {
		if e.attached[hostIf] {
			continue
		}
		if err := e.dp.Attach(hostIf); err != nil {
			// The link may be gone already (a DEL is on its way); do not let
			// one pod block every other pod's policy.
			e.log.Warn("attach endpoint; leaving it out of this apply", "if", hostIf, "err", err)
			delete(desired.Endpoints, hostIf)
			continue
		}
		e.attached[hostIf] = true
	}
	if err := e.dp.Apply(desired); err != nil {
		return fmt.Errorf("apply dataplane state: %w", err)
	}
	for hostIf := range e.attached {
		if _, ok := desired.Endpoints[hostIf]; ok {
			continue
		}
		if err := e.dp.Detach(hostIf); err != nil {
			e.log.Warn("detach endpoint", "if", hostIf, "err", err)
		}
		delete(e.attached, hostIf)
	}
	return nil
}

// Snapshot builds the compiler's input from one store read transaction:
// local endpoints are the Ready ones; a local pod's addresses come from its
// endpoint, remote pods' from their status.
func Snapshot(txn *store.Txn) (*policy.Snapshot, error) {
	snap := &policy.Snapshot{Namespaces: map[string]*policy.Namespace{}, Identities: map[string]policy.Peer{}}
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
	eps, err := store.EndpointsByState(txn, nil, store.EndpointReady)
	if err != nil {
		return nil, err
	}
	localAddrs := map[string][]netip.Addr{}
	for _, ep := range eps {
		le := policy.LocalEndpoint{HostIfName: ep.HostIfName, Namespace: ep.Pod.Namespace, PodName: ep.Pod.Name}
		for _, a := range ep.Addresses {
			if a.Addr.Is4() {
				le.IPv4 = a.Addr
			} else {
				le.IPv6 = a.Addr
			}
			if ep.Pod.Name != "" {
				key := ep.Pod.Namespace + "/" + ep.Pod.Name
				localAddrs[key] = append(localAddrs[key], a.Addr)
			}
		}
		snap.Local = append(snap.Local, le)
	}
	pods, err := store.Pods(txn, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if addrs, ok := localAddrs[p.Namespace+"/"+p.Name]; ok {
			p = withAddrs(p, addrs)
		}
		snap.Pods = append(snap.Pods, p)
	}
	return snap, nil
}

// withAddrs returns a copy of p whose status lists addrs, the addresses CNI
// gave the local pod; the stored object is left alone.
func withAddrs(p *policy.Pod, addrs []netip.Addr) *policy.Pod {
	c := *p
	c.Status.PodIP = ""
	c.Status.PodIPs = make([]policy.PodIP, len(addrs))
	for i, a := range addrs {
		c.Status.PodIPs[i] = policy.PodIP{IP: a.String()}
	}
	if len(addrs) > 0 {
		c.Status.PodIP = addrs[0].String()
	}
	return &c
}
