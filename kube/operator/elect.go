package operator

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	apiequality "lockstep.dev/lockstep/kube/api/equality"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/client"
)

// elector campaigns for one coordination.k8s.io/v1 Lease and runs a term
// of the operator for as long as it holds it. It follows the algorithm of
// client-go's tools/leaderelection, which it replaces only to keep
// client-go's generated clientset out of the binary (see the package
// documentation):
//
//   - A Lease is free when it has no holder, or when its record has not
//     changed for leaseDurationSeconds by this replica's own clock (it
//     never compares its clock with the holder's renewTime).
//   - Taking and renewing it are Updates conditional on its
//     resourceVersion, so of two candidates exactly one wins.
//   - The holder renews every retryPeriod. It gives up its term as soon as
//     a renewal finds another holder, and when renewDeadline passes after
//     its last successful renewal without another one: renewDeadline is
//     shorter than leaseDuration, so it has stopped writing before anyone
//     else may take the Lease.
type elector struct {
	leases                                    client.Interface
	namespace, name, identity                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	log                                       *slog.Logger
	// heartbeat is beaten by every attempt to take or renew the Lease,
	// and answered (when set) called each time the API server answered
	// one.
	heartbeat *watchdog.Loop
	answered  func()

	// observed is the Lease as last read and observedTime when, by the
	// local clock, its record last changed.
	observed     *coordinationv1.Lease
	observedTime time.Time
}

// attempt is the outcome of one try to take or renew the Lease.
type attempt int

const (
	attemptFailed attempt = iota // an error; try again
	attemptHeld                  // this replica holds the Lease
	attemptOther                 // another replica holds it and it has not expired
)

// run campaigns until ctx ends. Each time it takes the Lease it runs lead
// with a context that ends the moment the Lease is lost or in doubt, waits
// for lead to return, and campaigns again. When ctx ends it releases the
// Lease, after lead has returned, so the other replica takes over at once.
// An error from lead ends run.
func (e *elector) run(ctx context.Context, lead func(context.Context) error) error {
	for {
		e.log.Info("waiting to lead", "lease", e.namespace+"/"+e.name, "identity", e.identity)
		acquired, ok := e.acquire(ctx)
		if !ok {
			return nil
		}
		e.log.Info("leading", "lease", e.namespace+"/"+e.name, "identity", e.identity)
		term, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- lead(term) }()
		lost := make(chan struct{})
		go func() {
			defer close(lost)
			e.renew(term, acquired)
		}()
		var err error
		select {
		case <-lost:
			cancel()
			err = <-errc
		case err = <-errc:
			cancel()
			<-lost
		}
		if ctx.Err() != nil || err != nil {
			e.release()
			return err
		}
		e.log.Warn("lost the lease; stopped writing", "lease", e.namespace+"/"+e.name, "identity", e.identity)
	}
}

// acquire tries to take the Lease every retryPeriod (with jitter) until it
// does, returning when the successful request was sent, or until ctx ends.
func (e *elector) acquire(ctx context.Context) (time.Time, bool) {
	for {
		e.heartbeat.Beat()
		sent := time.Now()
		res, err := e.tryAcquireOrRenew(ctx, sent)
		if res == attemptHeld {
			return sent, true
		}
		if err != nil && ctx.Err() == nil {
			e.log.Debug("take lease", "err", err)
		}
		wait := e.retryPeriod + time.Duration(rand.Int64N(int64(e.retryPeriod)/5+1))
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(wait):
		}
	}
}

// renew keeps the Lease from last (when the request that took it was
// sent) until it is lost or ctx ends.
func (e *elector) renew(ctx context.Context, last time.Time) {
	for {
		e.heartbeat.Beat()
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.retryPeriod):
		}
		// No request may outlive the deadline: past it, another replica
		// may already lead.
		rctx, cancel := context.WithDeadline(ctx, last.Add(e.renewDeadline))
		renewed := e.renewOnce(rctx, &last)
		cancel()
		if !renewed {
			return
		}
	}
}

// renewOnce retries renewing until it succeeds, the Lease turns out to be
// another's, or ctx (bounded by the renew deadline) ends.
func (e *elector) renewOnce(ctx context.Context, last *time.Time) bool {
	for {
		e.heartbeat.Beat()
		sent := time.Now()
		res, err := e.tryAcquireOrRenew(ctx, sent)
		switch res {
		case attemptHeld:
			*last = sent
			return true
		case attemptOther:
			e.log.Warn("another replica holds the lease", "holder", holder(e.observed))
			return false
		}
		if ctx.Err() != nil {
			return false
		}
		e.log.Debug("renew lease", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.retryPeriod):
		}
	}
}

// tryAcquireOrRenew makes one attempt to take or keep the Lease; now is
// when it started.
func (e *elector) tryAcquireOrRenew(ctx context.Context, now time.Time) (attempt, error) {
	res, err := e.tryAcquireOrRenewOnce(ctx, now)
	if res != attemptFailed && e.answered != nil {
		e.answered()
	}
	return res, err
}

func (e *elector) tryAcquireOrRenewOnce(ctx context.Context, now time.Time) (attempt, error) {
	lease := new(coordinationv1.Lease)
	err := e.leases.Get().Namespace(e.namespace).Resource("leases").Name(e.name).Do(ctx).Into(lease)
	if apierrors.IsNotFound(err) {
		created := new(coordinationv1.Lease)
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: e.namespace},
			Spec:       e.spec(now, nil),
		}
		err := e.leases.Post().Namespace(e.namespace).Resource("leases").Body(lease).Do(ctx).Into(created)
		if err != nil {
			return attemptFailed, fmt.Errorf("create lease %s/%s: %w", e.namespace, e.name, err)
		}
		e.observed, e.observedTime = created, now
		return attemptHeld, nil
	}
	if err != nil {
		return attemptFailed, fmt.Errorf("get lease %s/%s: %w", e.namespace, e.name, err)
	}
	if e.observed == nil || !apiequality.Semantic.DeepEqual(e.observed.Spec, lease.Spec) {
		e.observed, e.observedTime = lease, now
	}
	if h := holder(lease); h != "" && h != e.identity {
		d := time.Duration(0)
		if lease.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
		}
		if e.observedTime.Add(d).After(now) {
			return attemptOther, nil
		}
	}
	next := lease.DeepCopy()
	next.Spec = e.spec(now, &lease.Spec)
	updated := new(coordinationv1.Lease)
	err = e.leases.Put().Namespace(e.namespace).Resource("leases").Name(e.name).Body(next).Do(ctx).Into(updated)
	if err != nil {
		return attemptFailed, fmt.Errorf("update lease %s/%s: %w", e.namespace, e.name, err)
	}
	e.observed, e.observedTime = updated, now
	return attemptHeld, nil
}

// spec is the Lease record this replica writes at now, prev the record it
// replaces (nil for a new Lease).
func (e *elector) spec(now time.Time, prev *coordinationv1.LeaseSpec) coordinationv1.LeaseSpec {
	id := e.identity
	secs := int32(math.Ceil(e.leaseDuration.Seconds()))
	t := metav1.NewMicroTime(now)
	s := coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &t}
	if prev != nil && prev.HolderIdentity != nil && *prev.HolderIdentity == id {
		s.AcquireTime, s.LeaseTransitions = prev.AcquireTime, prev.LeaseTransitions
		return s
	}
	transitions := int32(0)
	if prev != nil && prev.LeaseTransitions != nil {
		transitions = *prev.LeaseTransitions + 1
	}
	s.AcquireTime, s.LeaseTransitions = &t, &transitions
	return s
}

// release gives the Lease up, if this replica still holds it, so that
// another takes over without waiting for it to expire. The caller must
// have stopped writing first.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.renewDeadline)
	defer cancel()
	lease := new(coordinationv1.Lease)
	err := e.leases.Get().Namespace(e.namespace).Resource("leases").Name(e.name).Do(ctx).Into(lease)
	if err != nil || holder(lease) != e.identity {
		return
	}
	empty, one := "", int32(1)
	t := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &empty, &one, &t
	err = e.leases.Put().Namespace(e.namespace).Resource("leases").Name(e.name).Body(lease).Do(ctx).Error()
	if err != nil {
		e.log.Warn("release lease; it expires on its own", "lease", e.namespace+"/"+e.name, "err", err)
		return
	}
	e.log.Info("released the lease", "lease", e.namespace+"/"+e.name)
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
