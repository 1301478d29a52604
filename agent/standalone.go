package agent

import (
	"context"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/store"
)

// standaloneMode is the agent's half without a Kubernetes API server: the
// pools are configured, the policy source is a directory of manifests,
// and the agent is the endpoint-slice controller of the manifests'
// Services.
type standaloneMode struct {
	manifests *manifests.Watcher // nil without --manifests
	slices    *endpointslice.Controller
}

func (*standaloneMode) name() string { return "standalone" }

// serviceNode is empty: the slices standalone computes name no nodes, and
// every endpoint it knows counts as this node's.
func (*standaloneMode) serviceNode(*node) string { return "" }

// start reads the policy source before the API serves: pinned addresses
// and the first pods' policies must be known to the first ADD.
func (s *standaloneMode) start(_ context.Context, n *node) error {
	if n.cfg.Manifests == "" {
		return nil
	}
	w, err := loadManifests(n.st, n.cfg.Manifests, n.log)
	if err != nil {
		return err
	}
	s.manifests = w
	return nil
}

// configureEndpoints makes every write of the endpoint service also
// compute the Services' EndpointSlices: an ADD answers once its pod is a
// backend in force (lockstep probe connects through Services right after
// its ADDs), not when the slice controller's next transaction gets there;
// a transaction that cannot change a slice (an ADD's reserve) skips it.
// The pools are Config.Pools, and an ADD's endpoint is enforced with
// whatever the store knows of its pod.
func (*standaloneMode) configureEndpoints(c *endpoints.Config, _ *node) {
	c.Derive = func(txn *store.Txn) error {
		if !endpointslice.Affects(txn.Pending()) {
			return nil
		}
		_, err := endpointslice.SyncTxn(txn)
		return err
	}
}

// restored makes the agent the endpoint-slice controller of the
// manifests' Services (in Kubernetes mode the API server's is). The
// restored pods are backends in the first apply, as they were in the
// dataplane state a restart inherits.
func (s *standaloneMode) restored(_ context.Context, n *node) error {
	s.slices = endpointslice.New(n.st, n.log.With("component", "endpointslice"))
	s.slices.EndpointsSyncThemselves() // configureEndpoints
	return s.slices.Sync()
}

// runLoops follows the manifests and the pods behind the Services.
func (s *standaloneMode) runLoops(n *node) {
	if s.manifests != nil {
		s.manifests.SetHeartbeat(n.ops.loop("manifests"))
		go watchManifests(n.runCtx, n.st, s.manifests, n.log)
	}
	s.slices.SetHeartbeat(n.ops.loop("endpointslice"))
	go s.slices.Run(n.runCtx)
}

// awaitPools returns at once: the pools are configured.
func (*standaloneMode) awaitPools(context.Context, *node) error { return nil }
