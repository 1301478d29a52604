package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/store"
)

// Defaults for Config.
const (
	DefaultStateDir    = "/var/lib/lockstep"
	DefaultMetricsAddr = "127.0.0.1:9962"
	DefaultBPFRoot     = "/sys/fs/bpf/lockstep"
)

// ResyncInterval is how often the agent re-applies the committed state to
// the dataplane to repair drift, even when nothing changed.
const ResyncInterval = 5 * time.Minute

// Config configures the agent.
type Config struct {
	// Standalone runs without a Kubernetes API server: the pools are
	// Pools and the policy source is Manifests. Otherwise the agent runs
	// in Kubernetes mode: pods, namespaces, policies and nodes come from
	// the API server, the pools from the node's NodeIPAM blocks.
	Standalone bool
	// Pools are the address pools of standalone mode; Kubernetes mode
	// refuses them.
	Pools []netip.Prefix
	// NodeName is the Node the agent runs on (Kubernetes mode).
	NodeName string
	// Kubeconfig is a kubeconfig file to reach the API server with
	// (Kubernetes mode); empty means the pod's in-cluster config.
	Kubeconfig string
	StateDir   string
	Socket     string
	// MetricsAddr is the TCP address of /healthz, /readyz and /metrics
	// (":9962" listens on every address); empty disables the listener.
	MetricsAddr string
	// Manifests is a directory of Namespace, Pod and NetworkPolicy
	// manifests the agent enforces and follows (the standalone source;
	// Kubernetes mode refuses it).
	// Empty means no policy source: no pod is isolated, anti-spoofing
	// still applies.
	Manifests string
	// Dataplane is the policy backend: DataplaneEBPF (default),
	// DataplaneIptables or DataplaneHNS (Windows only).
	Dataplane string
	// HNSNetwork is the HNS network the hns dataplane programs
	// (DefaultHNSNetwork when empty).
	HNSNetwork string
	// BPFRoot is the bpffs directory the eBPF dataplane pins its maps
	// under; the other dataplanes clean it up if a previous agent left
	// maps there.
	BPFRoot string
	// Masquerade makes pod traffic to destinations outside the cluster's
	// pod CIDRs and NonMasqueradeCIDRs leave with the node's address
	// (agent/masquerade); false removes lockstep's masquerade rules.
	Masquerade bool
	// NonMasqueradeCIDRs are destinations outside the cluster that pods
	// reach with their own address: networks that route the pod CIDRs
	// back to the node.
	NonMasqueradeCIDRs []netip.Prefix
	// ClusterCIDRs add to the cluster's pod CIDRs, which are otherwise the
	// pools of every node (standalone: this node's).
	ClusterCIDRs []netip.Prefix
	// LeaveServicesToKubeProxy keeps the dataplane from translating pods'
	// connections to Services (the eBPF dataplane does by default, the
	// iptables dataplane standalone): kube-proxy translates them after
	// the dataplane has judged them, so egress policy sees the ClusterIP,
	// not the backend (--service-translation=false).
	LeaveServicesToKubeProxy bool
	// SkipSysctls leaves IP forwarding alone (for tests that run the agent
	// in-process on the machine's own namespace).
	SkipSysctls bool
	Logger      *slog.Logger
	// Ready, when set, is called once the agent serves ADDs.
	Ready func()
}

// Run runs the agent until ctx ends, then shuts down cleanly: it stops
// accepting requests, lets in-flight ones finish (bounded), and closes the
// state file.
//
// It does not start on a state file it cannot trust (empty, truncated,
// corrupt, another program's, of another schema, or not writable: see
// persist.Open), and it stops with an error once a commit to the state
// file has failed, rather than serve from memory the file disagrees with.
//
// In Kubernetes mode the API socket opens early and answers "starting"
// (CNI STATUS code 50, ADD code 11) while the agent waits, in order, for
// the API server's first complete list of pods, namespaces and policies,
// and for the node's NodeIPAM blocks; it serves ADDs once both are in and
// the restored endpoints are enforced.
func Run(ctx context.Context, cfg Config) error {
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
	// Refuse a bad configuration before touching anything.
	var kubeConfig *rest.Config
	if cfg.Standalone {
		if err := endpoints.ValidatePools(cfg.Pools); err != nil {
			return err
		}
	} else {
		var err error
		if kubeConfig, err = checkKubeConfig(cfg); err != nil {
			return err
		}
	}
	// Probes answer from here on, through every wait below.
	gate := newAPIGate()
	metrics := server.NewMetrics(gate.Status)
	errc := make(chan error, 4)
	ops, err := startOps(cfg, gate, metrics, errc, log)
	if err != nil {
		return err
	}
	defer ops.close()

	gate.setWaiting("the state file in " + cfg.StateDir)
	db, err := persist.Open(cfg.StateDir, 2*time.Second)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := store.New()
	if err != nil {
		return err
	}
	// The policy source is read before the API serves: pinned addresses
	// and the first pods' policies must be known to the first ADD.
	var manifestsWatcher *manifests.Watcher
	if cfg.Manifests != "" {
		if manifestsWatcher, err = loadManifests(st, cfg.Manifests, log); err != nil {
			return err
		}
	}

	var apiSrv *server.APIServer
	serveAPI := func() error {
		lis, err := server.ListenSocket(cfg.Socket)
		if err != nil {
			return err
		}
		apiSrv = server.NewAPIServer(gate, log, metrics)
		go func() { errc <- apiSrv.Serve(lis) }()
		return nil
	}
	// stopAPI stops accepting requests and lets those in flight finish,
	// bounded; it runs before the backend and the state file close.
	var stopOnce sync.Once
	stopAPI := func() {
		stopOnce.Do(func() {
			if apiSrv == nil {
				return
			}
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = apiSrv.Shutdown(shutdownCtx)
			os.Remove(cfg.Socket)
		})
	}
	defer stopAPI()
	runCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()

	masq := newMasq(cfg, log)
	var kube *kubeMode
	if !cfg.Standalone {
		// Kubernetes mode answers while it waits, so the runtime and
		// `lockstep status` can tell a starting agent from a missing one.
		if err := serveAPI(); err != nil {
			return err
		}
		if kube, err = startKube(runCtx, cfg, kubeConfig, st, ops, masq.setPeers, log); err != nil {
			return err
		}
		err := waitStep(ctx, gate, log, "the API server at "+kubeConfig.Host+" to list pods, namespaces, network policies, services, endpoint slices and nodes", kube.source.WaitSynced)
		if err != nil {
			return startCancelled(ctx, err)
		}
	}
	gate.setWaiting("the dataplane to load and enforce the restored endpoints")
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer be.close()
	defer stopAPI()
	keep, err := masq.open(ctx, be)
	if err != nil {
		return err
	}
	cleanups, err := startCleanups(ctx, cfg, st, db, be.name, keep, log)
	if err != nil {
		return err
	}
	enf := enforcer.New(st, be.dp, log)
	if kube != nil {
		if err := kube.reportPolicyFailures(runCtx, cfg.NodeName, st, enf, log); err != nil {
			return err
		}
	}
	svc, err := endpoints.New(st, db, endpoints.Config{Pools: cfg.Pools, PoolsFromStore: kube != nil, PinOptIn: kube != nil, Logger: log, Enforce: func(ctx context.Context, hostIf string) error {
		if kube != nil {
			if err := waitForPod(ctx, st, hostIf, PodObjectWait); err != nil {
				return err
			}
		}
		if err := enf.Sync(ctx); err != nil {
			return err
		}
		if !enf.Enforced(hostIf) {
			return fmt.Errorf("%s: %w", hostIf, enforcer.ErrNotEnforced)
		}
		return nil
	}})
	if err != nil {
		return err
	}
	var slices *endpointslice.Controller
	if kube == nil {
		// Standalone: the agent is the endpoint-slice controller of the
		// manifests' Services (in Kubernetes mode the API server's is).
		// The restored pods are backends in the first apply, as they were
		// in the dataplane state a restart inherits.
		slices = endpointslice.New(st, log.With("component", "endpointslice"))
		if err := slices.Sync(); err != nil {
			return err
		}
	}
	// Restored endpoints are enforced before the first new one is served.
	// An apply that fails does not stop the agent: the restored pods keep
	// what the dataplane holds, Run retries, and /readyz and lockstep
	// status say what is wrong. (A policy alone no longer fails an apply:
	// it fails closed for the pods it selects.)
	ops.enforcer.Store(enf)
	if err := enf.Sync(ctx); err != nil {
		if ctx.Err() != nil {
			return startCancelled(ctx, err)
		}
		log.Error("apply the restored state; serving, and retrying in the background", "err", err)
	}
	enf.SetHeartbeat(ops.loop("enforcer"))
	if err := masq.start(ctx, runCtx, st); err != nil {
		return err
	}
	go enf.Run(runCtx, ResyncInterval)
	be.startCompaction(runCtx, ops, log)
	cleanups.SetHeartbeat(ops.loop("cleanup"))
	go cleanups.Run(runCtx)
	if manifestsWatcher != nil {
		manifestsWatcher.SetHeartbeat(ops.loop("manifests"))
		go watchManifests(runCtx, st, manifestsWatcher, log)
	}
	if slices != nil {
		slices.SetHeartbeat(ops.loop("endpointslice"))
		go slices.Run(runCtx)
	}
	svc.OnWrite(metrics.ObserveWrite)
	var lastApply atomic.Int64
	enf.OnApply(func(d time.Duration) {
		metrics.ObservePolicyApply(d)
		lastApply.Store(time.Now().UnixNano())
	})
	metrics.AddWriter(dataplaneMetrics(be, cleanups, st, enf))
	if kube != nil {
		// Policy for the pods already running is enforced from here on;
		// new pods wait for the node's blocks.
		syncer, err := kube.startNodeIPAM(runCtx, cfg, st, db, svc, errc, ops.loop("nodeipam"), log)
		if err != nil {
			return err
		}
		if err := waitStep(ctx, gate, log, "the NodeIPAM of node "+cfg.NodeName+" to assign it address blocks", untilFailed(db, syncer.WaitReady)); err != nil {
			return startCancelled(ctx, err)
		}
		cfg.Pools = storePools(st)
		if err := masq.syncPools(ctx, st); err != nil {
			return err
		}
	}

	gate.open(&agentAPI{Service: svc, dataplane: func() *api.DataplaneStatus {
		return dataplaneStatus(be, enf, cleanups, lastApply.Load())
	}})
	if apiSrv == nil {
		if err := serveAPI(); err != nil {
			return err
		}
	}

	// Forwarding is switched on only once the agent can serve: a start that
	// fails leaves the node's settings as they were.
	if !cfg.SkipSysctls {
		if err := enableForwarding(cfg.Pools); err != nil {
			return err
		}
	}

	pools := make([]string, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		pools = append(pools, p.String())
	}
	mode := "standalone"
	if kube != nil {
		mode = "kubernetes"
	}
	log.Info("lockstep agent ready", "mode", mode, "node", cfg.NodeName, "socket", cfg.Socket, "state", db.Path(), "pools", pools, "dataplane", be.name)
	ops.setReady()
	if cfg.Ready != nil {
		cfg.Ready()
	}

	err = serveUntilStopped(ctx, errc, db, log)
	ops.shuttingDown()
	stopAPI()
	return err
}

// stateFile is what the serving agent watches of its state file.
type stateFile interface {
	Failed() <-chan struct{}
	Err() error
}

// untilFailed is wait, cut short with the state file's error once a commit
// to it fails: a start-up wait that needs writes would otherwise never
// end.
func untilFailed(db stateFile, wait func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-db.Failed():
				cancel()
			case <-ctx.Done():
			}
		}()
		err := wait(ctx)
		if dbErr := db.Err(); dbErr != nil {
			return fmt.Errorf("stop starting: %w", dbErr)
		}
		return err
	}
}

// serveUntilStopped blocks while the agent serves: until ctx ends (a clean
// stop, nil), a server fails, or a commit to the state file fails. The
// last is fatal: the file may then hold a change the store never made
// visible, the file takes no more writes, and only a restart, which
// reloads the file, makes the two agree again.
func serveUntilStopped(ctx context.Context, errc <-chan error, db stateFile, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return nil
	case err := <-errc:
		if err == nil {
			err = errors.New("API server stopped")
		}
		log.Error("server stopped", "err", err)
		return err
	case <-db.Failed():
		err := fmt.Errorf("stop serving: %w", db.Err())
		log.Error("state file failed", "err", err)
		return err
	}
}

// startCancelled is the result of a start-up wait that ended with err: a
// clean stop when ctx ended (the agent was told to stop while starting),
// err otherwise.
func startCancelled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// enableForwarding turns on IP forwarding in the agent's network namespace
// (the node's): pods reach each other and the world through it.
func enableForwarding(pools []netip.Prefix) error {
	keys := []string{"net/ipv4/ip_forward"}
	for _, p := range pools {
		if p.Addr().Is6() {
			keys = append(keys, "net/ipv6/conf/all/forwarding")
			break
		}
	}
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable forwarding (%s): %w", k, err)
		}
	}
	return nil
}
