package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/nodeipam"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/policyevents"
	"lockstep.dev/lockstep/agent/routes"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/source"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/watchdog"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/api/types"
	kubeclient "lockstep.dev/lockstep/kube/client"
)

// RoutesResyncInterval is how often the agent re-applies its routes to
// other nodes' blocks, repairing any that were deleted behind its back.
const RoutesResyncInterval = time.Minute

// kubeStartupProgress is how often a Kubernetes-mode start that is still
// waiting says what for.
const kubeStartupProgress = 15 * time.Second

// checkKubeConfig refuses what Kubernetes mode cannot use and returns the
// API server config.
func checkKubeConfig(cfg Config) (*kubeclient.Config, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("run agent: Kubernetes mode needs --node-name (or NODE_NAME), the name of the Node the agent runs on")
	case len(cfg.Pools) > 0:
		return nil, errors.New("run agent: --pool-cidr is for --standalone; in Kubernetes mode the pools are the blocks of the node's NodeIPAM")
	case cfg.Manifests != "":
		return nil, errors.New("run agent: --manifests is for --standalone; in Kubernetes mode pods, namespaces and policies come from the API server")
	}
	rc, err := kubeclient.LoadConfig(cfg.Kubeconfig)
	if err != nil && cfg.Kubeconfig == "" {
		return nil, fmt.Errorf("%w; to run without Kubernetes, pass --standalone", err)
	}
	return rc, err
}

// kubeMode is the agent's Kubernetes half: the API source, the routes to
// other nodes, the policy Events and the NodeIPAM syncer, which joins them
// once the endpoints service exists (awaitPools).
type kubeMode struct {
	config *kubeclient.Config
	source *source.Source
	routes *routes.Manager
}

func (*kubeMode) name() string { return "kubernetes" }

// serviceNode is the agent's Node: the EndpointSlice controller names each
// pod endpoint's node.
func (*kubeMode) serviceNode(n *node) string { return n.cfg.NodeName }

// start serves the API socket early, starts the Kubernetes source and the
// routes manager, which run until the node's runCtx ends, and waits for
// the source's first complete lists. The masquerade rules hear of the
// other nodes' blocks before the routes manager does.
func (k *kubeMode) start(ctx context.Context, n *node) error {
	// Kubernetes mode answers while it waits, so the runtime and
	// `lockstep status` can tell a starting agent from a missing one.
	if err := n.serveAPI(); err != nil {
		return err
	}
	log := n.log
	k.routes = routes.NewManager(log.With("component", "routes"))
	k.routes.SetHeartbeat(n.ops.loop("routes"))
	src, err := source.New(source.Options{
		Config: k.config, NodeName: n.cfg.NodeName, Store: n.st, Logger: log.With("component", "kube-source"),
		Heartbeat: n.ops.loop("kube-source"),
		OnNodes: func(nodes source.Nodes) {
			n.masq.setPeers(nodes.Peers)
			desired, problems := routes.Desired(nodes.Peers)
			for _, p := range problems {
				log.Warn("block of another node not routed", "problem", p)
			}
			k.routes.Set(desired)
		},
	})
	if err != nil {
		return err
	}
	k.source = src
	go src.Run(n.runCtx)
	go k.routes.Run(n.runCtx, RoutesResyncInterval)
	err = waitStep(ctx, n.gate, log, "the API server at "+k.config.Host+" to list pods, namespaces, network policies, services, endpoint slices and nodes", k.source.WaitSynced)
	if err != nil {
		return startCancelled(ctx, err)
	}
	return nil
}

// configureEndpoints takes the pools from the store (the node's NodeIPAM
// blocks), honours pinned addresses only in namespaces that opt in, and
// makes an ADD wait for its Pod object before its policy is applied
// (waitForPod).
func (*kubeMode) configureEndpoints(c *endpoints.Config, n *node) {
	c.PoolsFromStore, c.PinOptIn = true, true
	enforce := c.Enforce
	c.Enforce = func(ctx context.Context, hostIf string, rev uint64) error {
		if err := waitForPod(ctx, n.st, hostIf, PodObjectWait); err != nil {
			return err
		}
		// The pod's labels select its policies: enforce a state that
		// holds the pod too.
		return enforce(ctx, hostIf, max(rev, store.Revision(n.st.ReadTxn(), "")))
	}
}

// restored starts posting Events on the policies this node fails closed.
func (k *kubeMode) restored(_ context.Context, n *node) error {
	return k.reportPolicyFailures(n.runCtx, n.cfg.NodeName, n.st, n.enf, n.log)
}

// runLoops starts nothing: the source and the routes run since start.
func (*kubeMode) runLoops(*node) {}

// awaitPools starts the NodeIPAM syncer and waits for the node's blocks,
// which become the pools: policy for the pods already running is enforced
// from before, new pods wait for the blocks.
func (k *kubeMode) awaitPools(ctx context.Context, n *node) error {
	syncer, err := k.startNodeIPAM(n.runCtx, n.cfg, n.st, n.db, n.svc, n.errc, n.ops.loop("nodeipam"), n.log)
	if err != nil {
		return err
	}
	if err := waitStep(ctx, n.gate, n.log, "the NodeIPAM of node "+n.cfg.NodeName+" to assign it address blocks", untilFailed(n.db, syncer.WaitReady)); err != nil {
		return startCancelled(ctx, err)
	}
	n.cfg.Pools = storePools(n.st)
	return n.masq.syncPools(ctx, n.st)
}

// startNodeIPAM starts the agent's half of IPAM on the endpoints service:
// the node's NodeIPAM blocks become the store's pools (agent/nodeipam). Its
// Run failing is the agent failing, reported on errc; its loop beats hb.
func (k *kubeMode) startNodeIPAM(ctx context.Context, cfg Config, st *store.Store, db *persist.DB, svc *endpoints.Service, errc chan<- error, hb *watchdog.Loop, log *slog.Logger) (*nodeipam.Syncer, error) {
	syncer, err := nodeipam.New(nodeipam.Options{
		Config: k.config, NodeName: cfg.NodeName, Store: st, DB: db, Service: svc,
		Logger: log.With("component", "nodeipam"), Heartbeat: hb,
	})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := syncer.Run(ctx); err != nil {
			errc <- fmt.Errorf("run nodeipam: %w", err)
		}
	}()
	return syncer, nil
}

// PodObjectWait bounds how long a Kubernetes-mode ADD waits, before its
// policy is applied, for the API server to have told the agent about the
// pod. The kubelet runs CNI ADD only for a pod already bound to the node,
// so the object is at most an informer event away; a pod the agent does
// not know has no labels, and no policy could select it.
const PodObjectWait = 3 * time.Second

// waitForPod returns once the store knows the Pod of the endpoint on
// hostIf (at once for an endpoint without a pod name, as a plain container
// runtime makes), or fails with CodeTryAgainLater after wait: the
// ADD then rolls back and the runtime retries, rather than start a pod
// that no policy isolates.
func waitForPod(ctx context.Context, st *store.Store, hostIf string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		ws := memdb.NewWatchSet()
		txn := st.ReadTxn()
		ep, err := store.EndpointByHostIf(txn, nil, hostIf)
		if err != nil {
			return err
		}
		if ep == nil || ep.Pod.Name == "" {
			return nil
		}
		pod, err := store.PodByName(txn, ws, ep.Pod.Namespace, ep.Pod.Name)
		if err != nil {
			return err
		}
		if pod != nil {
			return nil
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return &api.Error{
				Code:    api.CodeTryAgainLater,
				Msg:     fmt.Sprintf("pod %s/%s is not known to the lockstep agent yet, so no policy can select it", ep.Pod.Namespace, ep.Pod.Name),
				Details: "the agent has not received the Pod from the API server; the runtime retries the ADD",
			}
		}
	}
}

// storePools returns the CIDRs of the store's pools that are not draining:
// in Kubernetes mode, the node's usable blocks.
func storePools(st *store.Store) []netip.Prefix {
	pools, _ := store.Pools(st.ReadTxn(), nil)
	var out []netip.Prefix
	for _, p := range pools {
		if !p.Draining {
			out = append(out, p.CIDR)
		}
	}
	return out
}

// waitStep waits for one start-up step, telling the API's callers what the
// agent waits for and saying so in the log every kubeStartupProgress.
func waitStep(ctx context.Context, gate *apiGate, log *slog.Logger, what string, wait func(context.Context) error) error {
	gate.setWaiting(what)
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	start := time.Now()
	tick := time.NewTicker(kubeStartupProgress)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			log.Info("agent not ready yet", "waiting_for", what, "waited", time.Since(start).Round(time.Second))
		}
	}
}

// apiGate is the Backend the API server serves. Until the agent is ready
// it answers every call, STATUS included, with CodeTryAgainLater and what
// the agent waits for, which the CNI plugin turns into STATUS code 50 (the
// runtime holds pods back) and ADD code 11 (the runtime retries); then it
// passes every call to the endpoint service.
type apiGate struct {
	backend atomic.Pointer[server.Backend]
	waiting atomic.Pointer[string]
}

func newAPIGate() *apiGate {
	g := &apiGate{}
	g.setWaiting("start-up")
	return g
}

func (g *apiGate) setWaiting(what string) { g.waiting.Store(&what) }

// open makes b serve every call from now on.
func (g *apiGate) open(b server.Backend) { g.backend.Store(&b) }

func (g *apiGate) get() (server.Backend, error) {
	if b := g.backend.Load(); b != nil {
		return *b, nil
	}
	return nil, &api.Error{
		Code:    api.CodeTryAgainLater,
		Msg:     "lockstep agent is starting: waiting for " + *g.waiting.Load(),
		Details: "the agent serves pods once it is ready; see its log on this node",
	}
}

// CNIAdd implements server.Backend.
func (g *apiGate) CNIAdd(ctx context.Context, r api.CNIAddRequest, netns *os.File) (*api.CNIAddResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.CNIAdd(ctx, r, netns)
}

// CNIDel implements server.Backend.
func (g *apiGate) CNIDel(ctx context.Context, a api.Attachment) (*api.DelResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.CNIDel(ctx, a)
}

// CNICheck implements server.Backend.
func (g *apiGate) CNICheck(ctx context.Context, r api.CNICheckRequest, netns *os.File) (*api.CNICheckResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.CNICheck(ctx, r, netns)
}

// Add implements server.Backend.
func (g *apiGate) Add(ctx context.Context, r api.AddRequest) (*api.AddResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.Add(ctx, r)
}

// Confirm implements server.Backend.
func (g *apiGate) Confirm(ctx context.Context, r api.OpRequest) error {
	b, err := g.get()
	if err != nil {
		return err
	}
	return b.Confirm(ctx, r)
}

// Abort implements server.Backend.
func (g *apiGate) Abort(ctx context.Context, r api.OpRequest) error {
	b, err := g.get()
	if err != nil {
		return err
	}
	return b.Abort(ctx, r)
}

// Del implements server.Backend.
func (g *apiGate) Del(ctx context.Context, a api.Attachment) (*api.DelResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.Del(ctx, a)
}

// Get implements server.Backend.
func (g *apiGate) Get(ctx context.Context, a api.Attachment) (*api.Endpoint, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.Get(ctx, a)
}

// GC implements server.Backend.
func (g *apiGate) GC(ctx context.Context, r api.GCRequest) (*api.GCResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.GC(ctx, r)
}

// Status implements server.Backend.
func (g *apiGate) Status(ctx context.Context) (*api.StatusResponse, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	return b.Status(ctx)
}

// reportPolicyFailures posts an Event on each NetworkPolicy that this
// node enforces fail-closed, and when it no longer does
// (agent/policyevents), until ctx ends. Only the failed policies that
// select a pod of this node count (enforcer.Failures.Local): the node
// that fails a pod closed tells its owner, the others stay quiet. Status
// and metrics still show every failed policy of the cluster.
func (k *kubeMode) reportPolicyFailures(ctx context.Context, node string, st *store.Store, enf *enforcer.Enforcer, log *slog.Logger) error {
	core, err := kubeclient.ForGroup(k.config, corev1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	rep := policyevents.New(core, node, func(ns, name string) types.UID {
		if np, _ := store.PolicyByName(st.ReadTxn(), nil, ns, name); np != nil {
			return types.UID(np.UID)
		}
		return ""
	}, log.With("component", "policy-events"))
	enf.OnFailures(func(f enforcer.Failures) { rep.Update(f.Local) })
	go rep.Run(ctx)
	return nil
}
