package agent

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/cleanup"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/podnet"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/store"
)

// node is one run of the agent on its node: what Run builds, phase by
// phase (each a method below, in the order Run calls them), and what
// shutdown takes down again, in reverse order. A field is set by the
// phase that builds it and stays nil when Run stopped before that phase.
type node struct {
	cfg Config
	log *slog.Logger
	// mode is the standalone or the Kubernetes half: what differs between
	// the two at each phase.
	mode mode
	masq *masq

	// runCtx ends when Run returns (stopLoops): the loops and the
	// Kubernetes half run until it does.
	runCtx    context.Context
	stopLoops context.CancelFunc

	// serveProbes
	gate    *apiGate
	metrics *server.Metrics
	errc    chan error // a server or loop that fails, fatally
	ops     *opsEndpoint

	// openStateFile
	db *persist.DB
	st *store.Store

	// serveAPI, in Kubernetes mode from startMode on, otherwise in serve
	apiSrv *server.APIServer

	// openDataplane
	be       *backend
	cleanups *cleanup.Manager

	// restore
	enf *enforcer.Enforcer
	svc *endpoints.Service
	// lastApply is when the enforcer last applied, in Unix nanoseconds.
	lastApply atomic.Int64
	// verdicts serves `lockstep monitor` once the eBPF dataplane loads.
	verdicts verdictMonitor
}

// mode is what differs between standalone and Kubernetes mode, at each
// phase where they differ. newNode picks it: nothing else asks which mode
// the agent runs in.
type mode interface {
	// name is the mode in the ready log line.
	name() string
	// start runs before the dataplane loads: the standalone half reads
	// its policy source, the Kubernetes half starts following the API
	// server and waits for its first lists.
	start(ctx context.Context, n *node) error
	// configureEndpoints adds the mode's settings to the endpoint
	// service's configuration.
	configureEndpoints(c *endpoints.Config, n *node)
	// restored runs once the enforcer and the endpoint service exist,
	// before the restored endpoints are first applied.
	restored(ctx context.Context, n *node) error
	// runLoops starts the mode's loops that follow its policy source.
	runLoops(n *node)
	// awaitPools returns once the node's pools are known: at once when
	// they are configured.
	awaitPools(ctx context.Context, n *node) error
	// serviceNode is the Node whose endpoints are this node's when a
	// Service's internalTrafficPolicy is Local (policy.Snapshot.Node).
	serviceNode(n *node) string
}

// newNode applies cfg's defaults and refuses a bad configuration before
// anything is touched.
func newNode(cfg Config) (*node, error) {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Socket == "" {
		cfg.Socket = api.DefaultSocket
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	n := &node{cfg: cfg, log: log, masq: newMasq(cfg, log)}
	if cfg.Standalone {
		if err := endpoints.ValidatePools(cfg.Pools); err != nil {
			return nil, err
		}
		n.mode = &standaloneMode{}
		return n, nil
	}
	kubeConfig, err := checkKubeConfig(cfg)
	if err != nil {
		return nil, err
	}
	n.mode = &kubeMode{config: kubeConfig}
	return n, nil
}

// serveProbes serves /healthz, /readyz and /metrics: probes answer from
// here on, through every wait below.
func (n *node) serveProbes(context.Context) error {
	n.gate = newAPIGate()
	n.metrics = server.NewMetrics(n.gate.Status)
	n.errc = make(chan error, 4)
	ops, err := startOps(n.cfg, n.gate, n.metrics, n.errc, n.log)
	if err != nil {
		return err
	}
	n.ops = ops
	return nil
}

// openStateFile opens the state file (refusing one it cannot trust: see
// persist.Open) and the in-memory store it restores into.
func (n *node) openStateFile(context.Context) error {
	n.gate.setWaiting("the state file in " + n.cfg.StateDir)
	db, err := persist.Open(n.cfg.StateDir, 2*time.Second)
	if err != nil {
		return err
	}
	n.db = db
	db.OnWrite(n.metrics.ObserveWrite)
	st, err := store.NewDurable(db)
	if err != nil {
		return err
	}
	n.st = st
	return nil
}

// startMode starts the mode's half: the policy source is known before the
// dataplane loads and before the API serves an ADD.
func (n *node) startMode(ctx context.Context) error {
	return n.mode.start(ctx, n)
}

// openDataplane loads the backend, picks the masquerade rules' iptables
// mode, and cleans up (or schedules the clean-up of) the backends not in
// use.
func (n *node) openDataplane(ctx context.Context) error {
	n.gate.setWaiting("the dataplane to load and enforce the restored endpoints")
	be, err := openBackend(ctx, n.cfg, n.log)
	if err != nil {
		return err
	}
	n.be = be
	if dp, ok := be.dp.(ebpfDataplane); ok {
		n.verdicts.start(dp, n.st, n)
	}
	keep, err := n.masq.open(ctx, be)
	if err != nil {
		return err
	}
	cleanups, err := startCleanups(ctx, n.cfg, n.st, n.db, be.name, keep, n.log)
	if err != nil {
		return err
	}
	n.cleanups = cleanups
	return nil
}

// restore builds the enforcer and the endpoint service, which restores
// the endpoints of the state file, and applies them.
func (n *node) restore(ctx context.Context) error {
	n.enf = enforcer.New(n.st, n.be.dp, n.log)
	n.enf.SetLimits(n.be.limits())
	n.enf.SetReleaseDelay(n.be.releaseDelay)
	n.enf.SetNode(n.mode.serviceNode(n))
	n.enf.SetNodePortAddresses(n.cfg.NodePortAddresses)
	c := endpoints.Config{Pools: n.cfg.Pools, Logger: n.log, Enforce: n.enforce}
	n.mode.configureEndpoints(&c, n)
	svc, err := endpoints.New(n.st, n.db, c)
	if err != nil {
		return err
	}
	n.svc = svc
	if err := n.mode.restored(ctx, n); err != nil {
		return err
	}
	// Restored endpoints are enforced before the first new one is served.
	// An apply that fails does not stop the agent: the restored pods keep
	// what the dataplane holds, Run retries, and /readyz and lockstep
	// status say what is wrong. (A policy alone no longer fails an apply:
	// it fails closed for the pods it selects.)
	n.ops.enforcer.Store(n.enf)
	if err := n.enf.Sync(ctx); err != nil {
		if ctx.Err() != nil {
			return startCancelled(ctx, err)
		}
		n.log.Error("apply the restored state; serving, and retrying in the background", "err", err)
	}
	return nil
}

// enforce is the endpoint service's Enforce: it returns once the state
// of store revision rev, hostIf's endpoint included, is applied.
func (n *node) enforce(ctx context.Context, hostIf string, rev uint64) error {
	return n.enf.EnforceEndpoint(ctx, hostIf, rev)
}

// runLoops starts the loops that keep the node in step until runCtx ends:
// the enforcer's resync, the masquerade rules, the backend's compaction
// (a Compactor only), the clean-ups and the mode's own; and the metrics
// of the dataplane and the writes.
func (n *node) runLoops(ctx context.Context) error {
	n.enf.SetHeartbeat(n.ops.loop("enforcer"))
	if err := n.masq.start(ctx, n.runCtx, n.st); err != nil {
		return err
	}
	go n.enf.Run(n.runCtx, ResyncInterval)
	n.be.startCompaction(n.runCtx, n.ops, n.log)
	n.cleanups.SetHeartbeat(n.ops.loop("cleanup"))
	go n.cleanups.Run(n.runCtx)
	n.mode.runLoops(n)
	n.enf.OnApply(func(d time.Duration) {
		n.metrics.ObservePolicyApply(d)
		n.lastApply.Store(time.Now().UnixNano())
	})
	n.metrics.AddWriter(dataplaneMetrics(n.be, n.cleanups, n.st, n.enf))
	return nil
}

// awaitPools waits for the node's pools (Kubernetes mode: its NodeIPAM
// blocks); policy for the pods already running is enforced meanwhile.
func (n *node) awaitPools(ctx context.Context) error {
	return n.mode.awaitPools(ctx, n)
}

// serve opens the gate to the endpoint service, serves the API socket if
// it does not yet, enables forwarding and says the agent is ready.
func (n *node) serve(context.Context) error {
	n.gate.open(&agentAPI{Service: n.svc, Handler: podnet.New(n.svc), st: n.st, node: n.mode.serviceNode(n), nodePorts: n.cfg.NodePortAddresses, limits: n.be.limits(), dataplane: func() *api.DataplaneStatus {
		return dataplaneStatus(n.be, n.enf, n.cleanups, n.lastApply.Load())
	}})
	if err := n.serveAPI(); err != nil {
		return err
	}

	// Forwarding is switched on only once the agent can serve: a start that
	// fails leaves the node's settings as they were.
	if !n.cfg.SkipSysctls {
		if err := enableForwarding(n.cfg.Pools); err != nil {
			return err
		}
	}

	pools := make([]string, 0, len(n.cfg.Pools))
	for _, p := range n.cfg.Pools {
		pools = append(pools, p.String())
	}
	n.log.Info("lockstep agent ready", "mode", n.mode.name(), "node", n.cfg.NodeName, "socket", n.cfg.Socket, "state", n.db.Path(), "pools", pools, "dataplane", n.be.name)
	n.ops.setReady()
	if n.cfg.Ready != nil {
		n.cfg.Ready()
	}
	return nil
}

// serveAPI opens the API socket and serves it through the gate, once:
// Kubernetes mode serves early, answering "starting" while it waits, so
// that the runtime and `lockstep status` can tell a starting agent from a
// missing one; standalone mode serves once ready.
func (n *node) serveAPI() error {
	if n.apiSrv != nil {
		return nil
	}
	lis, err := server.ListenSocket(n.cfg.Socket)
	if err != nil {
		return err
	}
	apiSrv := server.NewAPIServer(n.gate, n.log, n.metrics)
	apiSrv.SetMonitor(n.verdicts.serve)
	go func() { n.errc <- apiSrv.Serve(lis) }()
	n.apiSrv = apiSrv
	return nil
}

// shutdown takes down what the phases built, in reverse order: it stops
// accepting API requests and lets those in flight finish (bounded), ends
// the monitor streams and turns event emission off, stops the loops, then
// closes the backend, the state file and the probes' listener. It skips
// what was never built.
func (n *node) shutdown() {
	if n.apiSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.apiSrv.Shutdown(ctx)
		cancel()
		os.Remove(n.cfg.Socket)
	}
	// The API server no longer waits for monitor streams: they would end
	// with their connections, but perhaps after the agent exited, with
	// emission on.
	n.verdicts.stop()
	if n.stopLoops != nil {
		n.stopLoops()
	}
	if n.be != nil {
		_ = n.be.close()
	}
	if n.db != nil {
		n.db.Close()
	}
	if n.ops != nil {
		n.ops.close()
	}
}
