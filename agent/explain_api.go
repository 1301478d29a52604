package agent

import (
	"context"
	"errors"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/explain"
	"lockstep.dev/lockstep/agent/server"
)

// Explain answers `lockstep explain` from one read transaction of the
// store: the objects the enforcer compiles, within its limits, with local
// pods at the addresses CNI gave them.
func (a *agentAPI) Explain(_ context.Context, r api.ExplainRequest) (any, error) {
	q, err := explain.ParseQuery(r.From, r.To, r.Port, r.Family)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidConfig, "%v", err)
	}
	snap, err := enforcer.SnapshotFor(a.st.ReadTxn(), a.node, a.nodePorts)
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "read the committed state: %v", err)
	}
	snap.Limits = a.limits
	res, err := explain.Explain(snap, q)
	switch {
	case errors.Is(err, explain.ErrUnknownPod), errors.Is(err, explain.ErrBadQuery),
		errors.Is(err, explain.ErrUnknownService), errors.Is(err, explain.ErrServiceAddress):
		return nil, api.Errorf(api.CodeInvalidConfig, "%v", err)
	case err != nil:
		return nil, api.Errorf(api.CodeInternal, "%v", err)
	}
	return res, nil
}

// Explain implements server.Explainer.
func (g *apiGate) Explain(ctx context.Context, r api.ExplainRequest) (any, error) {
	b, err := g.get()
	if err != nil {
		return nil, err
	}
	e, ok := b.(server.Explainer)
	if !ok {
		return nil, api.Errorf(api.CodeNotAvailable, "this agent does not explain connections")
	}
	return e.Explain(ctx, r)
}
