package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/masquerade"
	"lockstep.dev/lockstep/agent/routes"
	"lockstep.dev/lockstep/agent/store"
)

// masq feeds agent/masquerade what it masquerades: the store's pools
// (draining ones too: their pods still hold addresses) as sources, and as
// the cluster those pools, the blocks of every other node (Kubernetes
// mode) and Config.ClusterCIDRs. It exists before the Kubernetes source
// starts, so the other nodes' blocks it hears of early are not lost, and
// programs nothing until start.
type masq struct {
	cfg Config
	log *slog.Logger
	run iptables.Runner

	mu    sync.Mutex
	mgr   *masquerade.Manager // nil until start, and when masquerading is off
	ctx   context.Context     // the agent's run context, for syncs from callbacks
	pools []netip.Prefix
	peers []netip.Prefix
}

func newMasq(cfg Config, log *slog.Logger) *masq {
	return &masq{cfg: cfg, log: log.With("component", "masquerade"), run: iptables.ExecRunner{}}
}

// open picks the iptables mode the rules live in, the dataplane's own mode
// when it is iptables and iptables.Detect's otherwise, and returns the
// chains the clean-ups of that mode must keep. With masquerading off it
// removes lockstep's rules from both modes instead and keeps nothing. The
// hns dataplane has no iptables: Windows nodes NAT with their HNS
// network's own policies, and open does nothing.
func (m *masq) open(ctx context.Context, be *backend) (map[string][]iptables.ChainRef, error) {
	if be.name == DataplaneHNS {
		return nil, nil
	}
	if !m.cfg.Masquerade {
		for _, mode := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
			changes, err := masquerade.Remove(ctx, m.run, mode)
			for _, ch := range changes {
				m.log.Info("masquerade rules removed (--masquerade=false)", "mode", mode.String(), "family", ch.Family.String())
			}
			if err != nil && !errors.Is(err, exec.ErrNotFound) {
				// Another backend's clean-up retries it if it is not the
				// mode in use; the next start tries again otherwise.
				m.log.Warn("remove masquerade rules", "mode", mode.String(), "err", err)
			}
		}
		return nil, nil
	}
	mode, err := iptables.ParseMode(be.name)
	if err != nil {
		if mode, err = iptables.Detect(ctx, m.run); err != nil {
			return nil, fmt.Errorf("masquerade pod traffic: %w (or run the agent with --masquerade=false)", err)
		}
	}
	m.mu.Lock()
	m.mgr = masquerade.NewManager(m.run, mode, m.log)
	m.mu.Unlock()
	m.log.Info("masquerading pod traffic that leaves the cluster", "mode", mode.String(), "non_masquerade", m.cfg.NonMasqueradeCIDRs, "cluster_cidrs", m.cfg.ClusterCIDRs)
	return map[string][]iptables.ChainRef{mode.String(): masquerade.Chains()}, nil
}

// start programs the rules for the store's pools now, whatever a previous
// agent left, then keeps them in step with the pools and repairs them
// every ResyncInterval until runCtx ends.
func (m *masq) start(ctx, runCtx context.Context, st *store.Store) error {
	m.mu.Lock()
	mgr := m.mgr
	m.mu.Unlock()
	if mgr == nil {
		return nil
	}
	pools, err := allPools(st, nil)
	if err != nil {
		return err
	}
	_ = m.update(ctx, func() { m.pools = pools }) // not started: only records
	if err := mgr.Sync(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	m.ctx = runCtx
	m.mu.Unlock()
	go mgr.Run(runCtx, ResyncInterval)
	go m.watchPools(runCtx, st)
	return nil
}

// syncPools reads the store's pools and, when they changed, syncs the
// rules before it returns.
func (m *masq) syncPools(ctx context.Context, st *store.Store) error {
	pools, err := allPools(st, nil)
	if err != nil {
		return err
	}
	return m.update(ctx, func() { m.pools = pools })
}

// watchPools follows the store's pools until ctx ends.
func (m *masq) watchPools(ctx context.Context, st *store.Store) {
	for {
		ws := memdb.NewWatchSet()
		pools, err := allPools(st, ws)
		if err != nil {
			m.log.Error("read pools for the masquerade rules", "err", err)
			return
		}
		if err := m.update(ctx, func() { m.pools = pools }); err != nil && ctx.Err() == nil {
			m.log.Warn("masquerade rules not yet in step with the pools; retrying", "err", err)
		}
		if ws.WatchCtx(ctx) != nil {
			return
		}
	}
}

// setPeers records the other nodes' blocks and, once started, syncs the
// rules before it returns: the Kubernetes source calls it before it hands
// the same blocks to the routes manager, so a block is never routed while
// it is still masqueraded.
func (m *masq) setPeers(peers []routes.Peer) {
	var blocks []netip.Prefix
	for _, p := range peers {
		blocks = append(blocks, p.Blocks...)
	}
	m.mu.Lock()
	ctx := m.ctx
	m.mu.Unlock()
	if ctx == nil {
		ctx = context.Background() // not started: update only records
	}
	if err := m.update(ctx, func() { m.peers = blocks }); err != nil && ctx.Err() == nil {
		m.log.Warn("masquerade rules not yet in step with other nodes' blocks; retrying", "err", err)
	}
}

// update changes the inputs under the lock and, when the Config changes
// and the manager is started, syncs it now (a failure is retried by the
// manager's Run).
func (m *masq) update(ctx context.Context, change func()) error {
	m.mu.Lock()
	change()
	c := masquerade.Config{
		Sources:       m.pools,
		Cluster:       slices.Concat(m.pools, m.peers, m.cfg.ClusterCIDRs),
		NonMasquerade: m.cfg.NonMasqueradeCIDRs,
	}
	mgr, started := m.mgr, m.ctx != nil
	m.mu.Unlock()
	if mgr == nil || !mgr.Set(c) || !started {
		return nil
	}
	return mgr.Sync(ctx)
}

// allPools returns the CIDRs of every pool of the store, draining or not.
func allPools(st *store.Store, ws memdb.WatchSet) ([]netip.Prefix, error) {
	if ws == nil {
		ws = memdb.NewWatchSet()
	}
	pools, err := store.Pools(st.ReadTxn(), ws)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.CIDR)
	}
	return out, nil
}
