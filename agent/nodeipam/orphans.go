package nodeipam

import (
	"context"
	"math"
	"time"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/store"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
)

// orphanMinGap bounds how often the reconcile asks the API server for a
// consistent pod list, however many pod events prompt it.
const orphanMinGap = time.Second

// runOrphans runs the orphan reconcile every OrphanInterval, and sooner
// (but at most once per orphanMinGap) when a pod on the node is deleted
// or changes.
func (s *Syncer) runOrphans(ctx context.Context) {
	tick := time.NewTicker(s.opts.OrphanInterval)
	defer tick.Stop()
	for {
		start := time.Now()
		if _, err := s.reconcileOrphans(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reconcile orphaned endpoints; retrying later", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(orphanMinGap))):
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.kickOrphans:
		}
	}
}

// reconcileOrphans releases the endpoints whose pod is gone (seed 001).
//
// The informer's cache picks the candidates: it is cheap, and it may lag
// the API server, so it only decides whether to ask. When some endpoint
// looks orphaned there, the reconcile reads the store's revision, then
// lists the node's pods with a consistent read, and hands both to
// endpoints.ReleaseOrphans: an endpoint is released only if no pod with
// its UID is in that list and it was created at or before the revision,
// that is before the list was requested, so its pod (created before its
// ADD) would be in the list were it alive. The reconcile writes nothing to
// pods. It returns how many endpoints it released.
func (s *Syncer) reconcileOrphans(ctx context.Context) (int, error) {
	cached := endpoints.PodList{Revision: math.MaxUint64}
	for _, raw := range s.podInf.List() {
		if p, ok := raw.(*corev1.Pod); ok {
			cached.Pods = append(cached.Pods, podOf(p))
		}
	}
	eps, err := store.Endpoints(s.opts.Store.ReadTxn(), nil)
	if err != nil {
		return 0, err
	}
	orphaned, candidates := endpoints.Orphaned(cached), 0
	for _, e := range eps {
		if orphaned(e) {
			candidates++
		}
	}
	if candidates == 0 {
		return 0, nil
	}
	list := endpoints.PodList{Revision: s.opts.Service.Revision()}
	pods, err := listPodsConsistent(ctx, s.core, s.name)
	if err != nil {
		return 0, err
	}
	for i := range pods.Items {
		list.Pods = append(list.Pods, podOf(&pods.Items[i]))
	}
	if s.hooks.afterPodList != nil {
		s.hooks.afterPodList()
	}
	released, err := s.opts.Service.ReleaseOrphans(ctx, list)
	s.pods.Store(&list)
	if s.hasIrregularBlocks() {
		s.reapDue.Store(true)
		s.poke(s.kick)
	}
	return len(released), err
}
