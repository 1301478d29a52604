package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/cleanup"
	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/podnet"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
)

// Dataplanes accepted by Config.Dataplane.
const (
	// DataplaneEBPF enforces with the eBPF programs (the default).
	DataplaneEBPF = "ebpf"
	// DataplaneIptables enforces with iptables and ipset, in whichever of
	// iptables-legacy and iptables-nft the node uses.
	DataplaneIptables = "iptables"
	// DataplaneHNS enforces with Windows HNS SetPolicies and ACLs.
	DataplaneHNS = "hns"
)

// backendEBPF is the eBPF dataplane's name in the state file and in
// clean-ups; iptables backends are named by iptables.Mode.String.
const backendEBPF = "ebpf"

// backend is the dataplane the agent drives: an enforcer.Dataplane that
// may also implement Counter, MetricsWriter, Compactor and io.Closer, each
// discovered with a type assertion (as io.Copy discovers an io.WriterTo),
// so that a backend says what it can do by having the method, and the
// agent has no empty function to call for what it cannot.
type backend struct {
	// name is the backend with its variant, e.g. "iptables-nft".
	name string
	dp   enforcer.Dataplane
	// servicesLeft: the backend translates no Service, kube-proxy does.
	servicesLeft bool
	// releaseDelay is the enforcer's (enforcer.SetReleaseDelay): the eBPF
	// dataplane makes an apply right after another wait for a grace
	// period; the others gain nothing from holding a release back.
	releaseDelay time.Duration
}

// limits are the enforcer's (enforcer.SetLimits): the agent's. Only the
// eBPF dataplane, translating Services itself, keeps them in maps of a
// fixed size; a backend that leaves them to kube-proxy, or has netfilter
// translate them, has no bound on the Services.
func (be *backend) limits() policy.Limits {
	l := policy.DefaultLimits
	if be.name != backendEBPF || be.servicesLeft {
		l.ServiceFrontends, l.ServiceBackends = 0, 0
	}
	return l
}

// Counter is implemented by dataplanes that report their sizes (map
// entries, rules) for `lockstep status`.
type Counter interface {
	Counts() map[string]int
}

// MetricsWriter is implemented by dataplanes with samples of their own in
// /metrics: WriteMetrics writes them, in the Prometheus text format, at
// scrape time.
type MetricsWriter interface {
	WriteMetrics(w io.Writer)
}

// Compactor is implemented by dataplanes whose applies leave garbage
// behind (iptables-nft's unreachable rules) that a step of its own
// removes: CompactDue reports garbage and a dataplane idle long enough
// for Compact to remove it now, off every pod's and policy's latency path.
type Compactor interface {
	CompactDue() bool
	Compact() error
}

// counts is the backend's sizes for `lockstep status`; nil when it does
// not count.
func (b *backend) counts() map[string]int {
	if c, ok := b.dp.(Counter); ok {
		return c.Counts()
	}
	return nil
}

// writeMetrics writes the backend's own samples, if it has any.
func (b *backend) writeMetrics(w io.Writer) {
	if m, ok := b.dp.(MetricsWriter); ok {
		m.WriteMetrics(w)
	}
}

// close releases what the backend holds (the eBPF objects); a backend
// that holds nothing is not an io.Closer.
func (b *backend) close() error {
	if c, ok := b.dp.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// startCompaction runs compactWhenIdle on the backend until ctx ends, if
// it is a Compactor, registering the loop as "compaction" only then; it
// reports whether it did.
func (b *backend) startCompaction(ctx context.Context, ops *opsEndpoint, log *slog.Logger) bool {
	c, ok := b.dp.(Compactor)
	if !ok {
		return false
	}
	go compactWhenIdle(ctx, time.Second, c, ops.loop("compaction"), log)
	return true
}

// compactWhenIdle compacts whenever c reports garbage and an idle
// backend, checking every interval until ctx ends. After a failed compact
// it waits 60 intervals before trying again; the periodic resync repairs
// the tables meanwhile. Each turn beats hb.
func compactWhenIdle(ctx context.Context, every time.Duration, c Compactor, hb *watchdog.Loop, log *slog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var quietUntil time.Time
	for {
		hb.Beat()
		select {
		case <-ctx.Done():
			return
		case <-hb.Tick():
		case now := <-tick.C:
			if now.Before(quietUntil) || !c.CompactDue() {
				continue
			}
			if err := c.Compact(); err != nil && ctx.Err() == nil {
				log.Warn("remove unreachable dataplane rules", "err", err)
				quietUntil = now.Add(60 * every)
			}
		}
	}
}

// setUplinks attaches host routing to cfg's uplinks, or detaches it
// everywhere when cfg turns it off. What fails is logged, not fatal: the
// devices it could not use, or all, keep every packet on the node's stack.
func setUplinks(dp *datapath.Datapath, cfg Config, log *slog.Logger) {
	var names []string
	if cfg.HostRouting {
		names = cfg.Uplinks
		if len(names) == 0 {
			found, err := datapath.DefaultUplinks()
			if err != nil {
				log.Warn("eBPF dataplane: host routing off: find the node's uplinks", "err", err)
			}
			names = found
		}
	}
	if err := dp.SetUplinks(names); err != nil {
		log.Warn("eBPF dataplane: host routing not on every uplink (tcx links need Linux 6.6); pods' packets through the others take the node's stack", "err", err)
	}
	listed, err := dp.Uplinks()
	switch {
	case !cfg.HostRouting:
		log.Info("eBPF dataplane: host routing off (--host-routing=false): pods' packets take the node's stack")
	case len(names) == 0:
		log.Info("eBPF dataplane: host routing has no uplink (no Ethernet device with a global address): pods' packets take the node's stack")
	case err != nil || len(listed) == 0:
		log.Warn("eBPF dataplane: host routing has no uplink: pods' packets take the node's stack", "tried", names, "err", err)
	default:
		log.Info("eBPF dataplane: host routing: pods' TCP connections with other nodes' pods skip the node's stack", "uplinks", names, "listed", len(listed))
	}
}

// residue is what a backend the agent does not use can have left behind.
type residue struct {
	// leftovers counts lockstep's objects still in the backend.
	leftovers func(ctx context.Context) (int, error)
	cleanup.Cleaner
}

// openBackend loads the dataplane cfg asks for.
func openBackend(ctx context.Context, cfg Config, log *slog.Logger) (*backend, error) {
	switch cfg.Dataplane {
	case "", DataplaneEBPF:
		dp, err := datapath.Load(datapath.Options{PinRoot: cfg.BPFRoot, Logger: log, LeaveServicesToKubeProxy: cfg.LeaveServicesToKubeProxy,
			MasqueradeMark: cfg.KubeProxyMasqueradeMark})
		if err != nil {
			return nil, err
		}
		if cfg.LeaveServicesToKubeProxy {
			log.Info("eBPF dataplane: Service translation off (--service-translation=false): kube-proxy translates pods' connections to ClusterIPs, and egress policy judges the ClusterIP")
		}
		setUplinks(dp, cfg, log)
		return &backend{name: backendEBPF, dp: ebpfDataplane{dp}, servicesLeft: cfg.LeaveServicesToKubeProxy, releaseDelay: enforcer.DefaultReleaseDelay}, nil
	case DataplaneIptables:
		return openIptables(ctx, cfg, log)
	case DataplaneHNS:
		return openHNS(ctx, cfg, log)
	}
	return nil, fmt.Errorf("run agent: unknown --dataplane %q: want %s, %s or %s", cfg.Dataplane, DataplaneEBPF, DataplaneIptables, DataplaneHNS)
}

// residues lists every backend other than current that lockstep knows how
// to clean on this node; keep names, by backend, the chains its clean-up
// leaves alone because the agent still uses them (the masquerade chain).
func residues(cfg Config, current string, keep map[string][]iptables.ChainRef) map[string]residue {
	all := map[string]residue{
		backendEBPF: {
			leftovers: func(context.Context) (int, error) { return datapath.Leftovers(cfg.BPFRoot) },
			Cleaner:   cleanup.CleanerFunc(func(context.Context) error { return datapath.Sweep(cfg.BPFRoot) }),
		},
	}
	for name, r := range iptablesResidues(keep) {
		all[name] = r
	}
	delete(all, current)
	return all
}

// CleanupTimeout bounds the clean-up attempt the agent makes at start,
// before it enforces anything; what is left is retried in the background.
const CleanupTimeout = 10 * time.Second

// startCleanups restores pending clean-ups, schedules one for the backend
// the agent ran with before (when it changed) and for every other backend
// that still holds lockstep state, records the backend now in use, and
// makes a first attempt. keep is residues'.
func startCleanups(ctx context.Context, cfg Config, st *store.Store, db *persist.DB, current string, keep map[string][]iptables.ChainRef, log *slog.Logger) (*cleanup.Manager, error) {
	res := residues(cfg, current, keep)
	cleaners := make(map[string]cleanup.Cleaner, len(res))
	for name, r := range res {
		cleaners[name] = r.Cleaner
	}
	mgr := cleanup.New(st, db, cleaners, log)
	if err := mgr.Restore(); err != nil {
		return nil, err
	}
	prev, err := db.Dataplane()
	if err != nil {
		return nil, err
	}
	if prev != "" && prev != current {
		if err := mgr.Schedule(prev, fmt.Sprintf("dataplane changed from %s to %s", prev, current)); err != nil {
			return nil, err
		}
	}
	for name, r := range res {
		n, err := r.leftovers(ctx)
		if errors.Is(err, exec.ErrNotFound) {
			continue // the backend's tools are not installed: nothing of it to clean
		}
		if err != nil {
			log.Warn("look for state left in a dataplane backend not in use", "backend", name, "err", err)
			continue
		}
		if n > 0 {
			if err := mgr.Schedule(name, fmt.Sprintf("found %d objects of lockstep's in %s, which this agent does not use", n, name)); err != nil {
				return nil, err
			}
		}
	}
	if prev != current {
		if err := db.SetDataplane(current); err != nil {
			return nil, err
		}
	}
	// A pending clean-up of the backend now in use would destroy what this
	// agent is about to apply: it is done, by definition.
	if err := dropCleanup(st, current); err != nil {
		return nil, err
	}
	attemptCtx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	if _, err := mgr.RunOnce(attemptCtx); err != nil {
		return nil, err
	}
	return mgr, nil
}

// dropCleanup deletes the pending clean-up of backend, durably.
func dropCleanup(st *store.Store, backend string) error {
	return st.Update(func(txn *store.Txn) error { return store.DeleteCleanup(txn, backend) })
}

// agentAPI is the API the agent serves: the endpoint service's, the CNI
// verbs carried out over it, and the dataplane's state added to Status.
type agentAPI struct {
	*endpoints.Service
	*podnet.Handler
	dataplane func() *api.DataplaneStatus
	// st is read by Explain, which translates Services for the pods of
	// node (policy.Snapshot.Node), NodePorts on its addresses that
	// nodePorts chooses, within the enforcer's limits.
	st        *store.Store
	node      string
	nodePorts enforcer.NodePorts
	limits    policy.Limits
}

// Status answers the CNI STATUS verb and `lockstep status`.
func (a *agentAPI) Status(ctx context.Context) (*api.StatusResponse, error) {
	st, err := a.Service.Status(ctx)
	if err != nil {
		return nil, err
	}
	st.Dataplane = a.dataplane()
	return st, nil
}

// dataplaneStatus reports be's state; lastApply is in Unix nanoseconds, 0
// before the first apply.
func dataplaneStatus(be *backend, enf *enforcer.Enforcer, cleanups *cleanup.Manager, lastApply int64) *api.DataplaneStatus {
	out := &api.DataplaneStatus{Name: be.name, PendingCleanups: []api.CleanupStatus{}}
	if lastApply != 0 {
		out.LastApply = time.Unix(0, lastApply).UTC()
	}
	if err := enf.LastError(); err != nil {
		out.LastApplyError = err.Error()
	}
	out.Counts = be.counts()
	svcs := enf.Services()
	out.Services = &api.ServicesStatus{Frontends: svcs.Frontends, Backends: svcs.Backends, WithoutBackends: svcs.NoBackends,
		WithoutLocalBackends: svcs.NoLocalBackends, LeftToKubeProxy: be.servicesLeft}
	f := enf.Failures()
	for _, ns := range slices.Sorted(maps.Keys(f.Services)) {
		out.Services.OverCapacity = append(out.Services.OverCapacity, api.ServicesOverCapacity{Namespace: ns, Reason: f.Services[ns]})
	}
	for _, name := range slices.Sorted(maps.Keys(f.Policies)) {
		out.FailedPolicies = append(out.FailedPolicies, api.PolicyFailure{Policy: name, Reason: f.Policies[name]})
	}
	for _, ef := range f.Endpoints {
		out.FailedEndpoints = append(out.FailedEndpoints, api.EndpointFailure{HostIf: ef.HostIf,
			Ingress: ef.Reasons[policyapi.Ingress], Egress: ef.Reasons[policyapi.Egress]})
	}
	for _, c := range cleanups.Pending() {
		out.PendingCleanups = append(out.PendingCleanups, api.CleanupStatus{
			Backend: c.Backend, Reason: c.Reason, Since: c.Since, Attempts: c.Attempts,
			LastError: c.LastError, LastAttempt: c.LastAttempt,
		})
	}
	return out
}
