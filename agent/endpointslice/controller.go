package endpointslice

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hashicorp/go-memdb"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
)

// retryDelay is how long Run waits after a failed sync.
const retryDelay = time.Second

// SyncTxn makes the store's EndpointSlices, inside the write transaction
// txn, those its Services and pods give (see [Slices]); a slice equal to
// the stored one is not rewritten. It reports whether anything changed.
// With no Service it reads no pod: there are only old slices to delete.
func SyncTxn(txn *store.Txn) (bool, error) {
	svcs, err := store.Services(txn, nil)
	if err != nil {
		return false, err
	}
	if len(svcs) == 0 {
		return store.ReplaceEndpointSlices(txn, nil)
	}
	pods, err := podsWithAddrs(txn)
	if err != nil {
		return false, err
	}
	var all []*policyapi.EndpointSlice
	for _, svc := range svcs {
		all = append(all, Slices(svc, pods)...)
	}
	return store.ReplaceEndpointSlices(txn, all)
}

// Affects reports whether changes, a transaction's (store.Txn.Pending),
// can change what SyncTxn computes: a pod or a Service changed, or an
// endpoint became Ready, or a Ready one changed or went. An ADD's reserve
// (a new Pending endpoint, its addresses) cannot: a Pending endpoint gives
// its pod no address.
func Affects(changes []store.Change) bool {
	for _, c := range changes {
		switch c.Table {
		case store.TablePods, store.TableServices:
			return true
		case store.TableEndpoints:
			if store.IsReadyEndpoint(c.Before) || store.IsReadyEndpoint(c.After) {
				return true
			}
		}
	}
	return false
}

// podsWithAddrs returns every stored pod with the addresses it has: those
// of its Ready CNI endpoint for a pod of this node, as the enforcer gives
// them to the compiler, else those of its status.
func podsWithAddrs(txn *store.Txn) ([]Pod, error) {
	eps, err := store.EndpointsByState(txn, nil, store.EndpointReady)
	if err != nil {
		return nil, err
	}
	local := map[[2]string][]netip.Addr{}
	for _, ep := range eps {
		if ep.Pod.Name == "" {
			continue
		}
		ref := [2]string{ep.Pod.Namespace, ep.Pod.Name}
		for _, a := range ep.Addresses {
			local[ref] = append(local[ref], a.Addr)
		}
	}
	objs, err := store.Pods(txn, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(objs))
	for _, p := range objs {
		addrs, ok := local[[2]string{p.Namespace, p.Name}]
		if !ok {
			addrs = statusAddrs(p)
		}
		out = append(out, Pod{Object: p, Addrs: addrs})
	}
	return out, nil
}

// statusAddrs returns the addresses of a pod's status that parse.
func statusAddrs(p *policyapi.Pod) []netip.Addr {
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []policyapi.PodIP{{IP: p.Status.PodIP}}
	}
	var out []netip.Addr
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Controller keeps the store's EndpointSlices in step with its pods,
// Services and local endpoints.
type Controller struct {
	store     *store.Store
	log       *slog.Logger
	heartbeat *watchdog.Loop
	watched   []string // the tables Run follows
}

// New returns a Controller of st; Run starts it.
func New(st *store.Store, log *slog.Logger) *Controller {
	if log == nil {
		log = slog.Default()
	}
	return &Controller{store: st, log: log,
		watched: []string{store.TablePods, store.TableServices, store.TableEndpoints}}
}

// SetHeartbeat makes Run beat hb on every turn, and turn on hb's Tick when
// idle; call it before Run.
func (c *Controller) SetHeartbeat(hb *watchdog.Loop) { c.heartbeat = hb }

// EndpointsSyncThemselves tells Run that every write of local endpoints
// already runs SyncTxn in its own transaction (the agent's endpoint
// service, endpoints.Config.Derive): Run then follows pods and Services
// only, instead of computing again, after each such commit, what that
// commit already wrote. Call it before Run.
func (c *Controller) EndpointsSyncThemselves() {
	c.watched = []string{store.TablePods, store.TableServices}
}

// Run syncs the slices, then again after every commit that changes pods,
// Services or local endpoints (see EndpointsSyncThemselves), until ctx
// ends. Each sync is one write transaction, committed only when a slice
// changed.
func (c *Controller) Run(ctx context.Context) {
	for {
		c.heartbeat.Beat()
		ws := memdb.NewWatchSet()
		txn := c.store.ReadTxn()
		for _, table := range c.watched {
			if ch, _, err := store.WatchRevision(txn, table); err == nil {
				ws.Add(ch)
			}
		}
		// Watched before the sync reads: a commit in between wakes the
		// next turn. The turn's context ends the watch's goroutine.
		turn, done := context.WithCancel(ctx)
		changed := ws.WatchCh(turn)
		var retry <-chan time.Time
		if err := c.Sync(); err != nil {
			c.log.Error("compute the EndpointSlices of the Services; retrying", "err", err, "in", retryDelay)
			changed, retry = nil, time.After(retryDelay)
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-retry:
		case <-c.heartbeat.Tick():
		}
		done()
		if ctx.Err() != nil {
			return
		}
	}
}

// Sync makes the store's slices those of its Services and pods now, in a
// write transaction committed only when a slice changed.
func (c *Controller) Sync() error {
	txn := c.store.WriteTxn()
	defer txn.Abort()
	changed, err := SyncTxn(txn)
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	return txn.Commit()
}
