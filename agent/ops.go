package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/internal/ops"
	"lockstep.dev/lockstep/internal/watchdog"
)

// LoopDeadline is how long one of the agent's long-running loops may go
// without turning before /healthz fails and the kubelet restarts the agent.
// A loop turns at least every quarter of it even when idle, and its
// retries against an API server that is slow or away turn it too, so only
// a loop that is stuck (on a lock, in a command that never returns) or
// gone misses it.
const LoopDeadline = 3 * time.Minute

// opsEndpoint is the agent's /healthz (its loops turn), /readyz (it serves
// CNI ADDs) and /metrics on --metrics-addr, and the watchdog its loops
// beat. It starts before anything the agent waits for, so probes answer
// during every start-up wait.
type opsEndpoint struct {
	watchdog *watchdog.Watchdog
	gate     *apiGate
	srv      *ops.Server // nil when --metrics-addr is empty
	// ready is set once the agent has finished starting, stopping once it
	// begins to shut down.
	ready, stopping atomic.Bool
	// enforcer, once set, is asked whether the applied state enforces
	// every policy as written.
	enforcer atomic.Pointer[enforcer.Enforcer]
}

// startOps serves the ops endpoints on cfg.MetricsAddr (none when it is
// empty). A listener that stops is reported on errc.
func startOps(cfg Config, gate *apiGate, metrics *server.Metrics, errc chan<- error, log *slog.Logger) (*opsEndpoint, error) {
	o := &opsEndpoint{watchdog: watchdog.New(), gate: gate}
	if cfg.MetricsAddr == "" {
		return o, nil
	}
	loops := ops.Check{Name: "loops", Fn: o.watchdog.Check}
	h := ops.Handler(ops.Endpoints{
		Live:    []ops.Check{loops},
		Ready:   []ops.Check{loops, {Name: "start-up", Fn: o.started}, {Name: "policy", Fn: o.policyApplied}},
		Metrics: metrics.WritePrometheus,
	})
	srv, err := ops.Listen(cfg.MetricsAddr, h)
	if err != nil {
		return nil, fmt.Errorf("listen for health and metrics: %w (choose another address with --metrics-addr, or disable it with --metrics-addr='')", err)
	}
	o.srv = srv
	go func() {
		if err := srv.Serve(); err != nil {
			errc <- fmt.Errorf("serve health and metrics on %s: %w", srv.Addr(), err)
		}
	}()
	log.Info("serving /healthz, /readyz and /metrics", "addr", srv.Addr())
	return o, nil
}

// loop registers a long-running loop with the watchdog.
func (o *opsEndpoint) loop(name string) *watchdog.Loop {
	return o.watchdog.Register(name, LoopDeadline)
}

// started is /readyz's check: nil once the agent serves ADDs, otherwise
// what it waits for.
func (o *opsEndpoint) started(context.Context) error {
	switch {
	case o.stopping.Load():
		return errors.New("the agent is shutting down")
	case o.ready.Load():
		return nil
	case o.gate.backend.Load() == nil:
		return errors.New("waiting for " + *o.gate.waiting.Load())
	}
	return errors.New("finishing start-up: opening the API socket and enabling forwarding")
}

// policyApplied is /readyz's check that the dataplane holds the state
// the store commits: the last apply succeeded. A policy that fails closed
// does not fail it: the apply enforced it, closed, for the pods it
// selects, and a tenant's policy must not make every node's agent unready
// (which would stall the DaemonSet's rolling updates); lockstep status,
// /metrics and an Event on the policy say it.
func (o *opsEndpoint) policyApplied(context.Context) error {
	enf := o.enforcer.Load()
	if enf == nil {
		return nil
	}
	if err := enf.LastError(); err != nil {
		return fmt.Errorf("the last apply failed (retrying): %w", err)
	}
	return nil
}

// setReady makes /readyz pass.
func (o *opsEndpoint) setReady() { o.ready.Store(true) }

// shuttingDown makes /readyz fail from now on.
func (o *opsEndpoint) shuttingDown() { o.stopping.Store(true) }

// close closes the listener, letting requests in flight finish.
func (o *opsEndpoint) close() {
	if o.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
}
