package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/internal/ops"
	"lockstep.dev/lockstep/internal/promtext"
	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// LoopDeadline is how long the elector's loop or a term's controller loop
// may go without turning before /healthz fails. Both turn every few
// seconds (the elector every retry period, the controller on every resync
// and at least every quarter of the deadline when idle), and a pass beats
// between its writes, so a slow API server does not trip it; a request
// that never returns does.
const LoopDeadline = 3 * time.Minute

// opsState is what the operator shows on --metrics-addr: /healthz (its
// loops turn), /readyz (it does its job: as leader with synced informers,
// or as a standby that has read the Lease) and /metrics. Its methods may
// be called on a nil *opsState (controllers in tests) and then do nothing.
type opsState struct {
	watchdog    *watchdog.Watchdog
	leaderElect bool
	lease       string // namespace/name, for messages

	// leading is set while this replica runs a term, synced once the
	// term's informers have listed, seenLease once the elector has had an
	// answer about the Lease.
	leading, synced, seenLease atomic.Bool

	reg                *promtext.Registry
	assigned, released *promtext.Counter
	drained            *promtext.Counter
	handshake          *promtext.Counter
	passes             *promtext.Counter
	passDur, planDur   *promtext.Histogram
}

func newOpsState(cfg *Config) *opsState {
	reg := promtext.NewRegistry()
	o := &opsState{
		watchdog:    watchdog.New(),
		leaderElect: cfg.LeaderElect,
		lease:       cfg.LeaseNamespace + "/" + cfg.LeaseName,
		reg:         reg,
		assigned: reg.NewCounter("lockstep_operator_blocks_assigned_total",
			"Blocks this replica added to NodeIPAMs, by IPPool.", "pool"),
		released: reg.NewCounter("lockstep_operator_blocks_released_total",
			"Blocks this replica took back from NodeIPAMs through the release handshake, by IPPool.", "pool"),
		drained: reg.NewCounter("lockstep_operator_blocks_drained_total",
			"Of the blocks released, those drained: taken back because they were outside their IPPool's CIDRs (the pool was shrunk or deleted), by IPPool.", "pool"),
		handshake: reg.NewCounter("lockstep_operator_handshake_steps_total",
			"Release handshake steps this replica wrote: mark (an excess block marked for release), drain (a block outside its IPPool marked, or its mark made a drain mark), withdraw (mark withdrawn), release (block taken back), forget (released mark cleared).", "step"),
		passes: reg.NewCounter("lockstep_operator_passes_total",
			"Reconcile passes (plan, then write the plan), by result: ok, or error when a write failed and the pass is retried.", "result"),
		passDur: reg.NewHistogram("lockstep_operator_pass_duration_seconds",
			"Time of one reconcile pass: planning and every write it made.", promtext.ExponentialBuckets(1e-3, 2, 16)),
		planDur: reg.NewHistogram("lockstep_operator_plan_duration_seconds",
			"Time to plan once from the informers' caches (no API request).", promtext.ExponentialBuckets(10e-6, 2, 16)),
	}
	// Series a dashboard rates over exist from the start.
	for _, result := range []string{"ok", "error"} {
		o.passes.Add(0, result)
	}
	for _, a := range []action{actionMark, actionDrain, actionWithdraw, actionRelease, actionForget} {
		o.handshake.Add(0, string(a))
	}
	reg.RegisterWriter(func(w io.Writer) {
		promtext.WriteHeader(w, "lockstep_operator_leader", "1 while this replica leads (runs a term and may write), 0 while it stands by.", "gauge")
		leading := 0.0
		if o.leading.Load() {
			leading = 1
		}
		promtext.WriteSample(w, "lockstep_operator_leader", leading)
	})
	reg.RegisterWriter(promtext.WriteProcessMetrics)
	return o
}

// listen opens the ops endpoint on addr.
func (o *opsState) listen(addr string) (*ops.Server, error) {
	loops := ops.Check{Name: "loops", Fn: o.watchdog.Check}
	h := ops.Handler(ops.Endpoints{
		Live:    []ops.Check{loops},
		Ready:   []ops.Check{loops, {Name: "role", Fn: o.ready}},
		Metrics: o.reg.Write,
	})
	srv, err := ops.Listen(addr, h)
	if err != nil {
		return nil, fmt.Errorf("listen for health and metrics: %w (choose another address with --metrics-addr, or disable it with --metrics-addr='')", err)
	}
	return srv, nil
}

// ready is /readyz's check. A leader is ready once its informers have
// listed; a standby once it has read the Lease (it can reach the API server
// and knows another replica leads).
func (o *opsState) ready(context.Context) error {
	switch {
	case o.leading.Load() && o.synced.Load():
		return nil
	case o.leading.Load():
		return errors.New("leading; waiting for the informers of Nodes, IPPools and NodeIPAMs to list")
	case !o.leaderElect:
		return errors.New("starting")
	case !o.seenLease.Load():
		return fmt.Errorf("waiting to read the Lease %s from the API server", o.lease)
	}
	return nil
}

// loop registers a long-running loop with the watchdog.
func (o *opsState) loop(name string) *watchdog.Loop {
	if o == nil {
		return nil
	}
	return o.watchdog.Register(name, LoopDeadline)
}

// term records that this replica leads (true) or has stopped leading.
func (o *opsState) term(leading bool) {
	if o == nil {
		return
	}
	o.synced.Store(false)
	o.leading.Store(leading)
}

// termSynced records that the term's informers have listed.
func (o *opsState) termSynced() {
	if o != nil {
		o.synced.Store(true)
	}
}

// leaseAnswered records that the API server answered about the Lease.
func (o *opsState) leaseAnswered() {
	if o != nil {
		o.seenLease.Store(true)
	}
}

// observePass records one reconcile pass and its planning time.
func (o *opsState) observePass(d, plan time.Duration, err error) {
	if o == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	o.passes.Inc(result)
	o.passDur.Observe(d.Seconds())
	o.planDur.Observe(plan.Seconds())
}

// blocksAssigned counts n blocks of pool added to a NodeIPAM.
func (o *opsState) blocksAssigned(pool string, n int) {
	if o != nil && n > 0 {
		o.assigned.Add(float64(n), pool)
	}
}

// specWritten counts the handshake steps of one spec update of old.
func (o *opsState) specWritten(old *v1alpha1.NodeIPAM, changes []change) {
	if o == nil {
		return
	}
	for _, ch := range changes {
		o.handshake.Inc(string(ch.action))
		if ch.action != actionRelease {
			continue
		}
		pool := ""
		if b := old.Spec.Block(ch.cidr); b != nil {
			pool = b.Pool
		}
		o.released.Inc(pool)
		if ch.drain {
			o.drained.Inc(pool)
		}
	}
}
