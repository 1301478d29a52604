package policyevents

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/client"
)

// Event reasons.
const (
	// ReasonFailsClosed: the node cannot enforce the policy as written; the
	// pods it selects there get no allow in the directions it declares.
	ReasonFailsClosed = "FailsClosed"
	// ReasonEnforced: the node enforces the policy as written again.
	ReasonEnforced = "Enforced"
)

// maxMessage is the longest message an Event carries; the API server
// refuses longer ones (1 KiB for events.k8s.io, lockstep's bound for both).
const maxMessage = 1024

// Reporter posts an Event on every NetworkPolicy whose failure on this
// node starts, changes or ends. It is given only the failed policies that
// select a pod of this node (enforcer.Failures.Local): every node compiles
// every policy, and were each to report them all, K failed policies on N
// nodes would post K times N Events.
type Reporter struct {
	core client.Interface
	node string
	uid  func(namespace, name string) types.UID
	log  *slog.Logger
	// next holds the latest set of failures Update was given, until Run
	// takes it.
	next chan map[string]string
	// reported is what the last posted events said, by namespace/name.
	reported map[string]string
}

// New returns a Reporter posting through core, a core/v1 REST client (see
// kube/client.ForGroup), as the agent of node. uid returns the UID of a
// policy the agent holds, so that the Event refers to that very object,
// and "" for one it no longer holds: a policy deleted gets no Enforced
// Event, there is no object left to carry it.
func New(core client.Interface, node string, uid func(namespace, name string) types.UID, log *slog.Logger) *Reporter {
	return &Reporter{core: core, node: node, uid: uid, log: log, next: make(chan map[string]string, 1), reported: map[string]string{}}
}

// Update hands the Reporter the failed policies (namespace/name to reason)
// of the state just applied that select a pod of this node. It never blocks: a set Run has not taken yet
// is replaced.
func (r *Reporter) Update(failed map[string]string) {
	for {
		select {
		case r.next <- failed:
			return
		default:
		}
		select {
		case <-r.next:
		default:
		}
	}
}

// Run posts the events of each set Update hands over until ctx ends. A
// post that fails is logged and retried with the next set.
func (r *Reporter) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case failed := <-r.next:
			r.post(ctx, failed)
		}
	}
}

// post posts what changed from r.reported to failed.
func (r *Reporter) post(ctx context.Context, failed map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		if why := failed[name]; r.reported[name] != why {
			if err := r.event(ctx, name, corev1.EventTypeWarning, ReasonFailsClosed,
				fmt.Sprintf("node %s cannot enforce this policy as written; the pods it selects there get no allow in the directions it declares until it is fixed: %s", r.node, why)); err != nil {
				r.log.Warn("post an event on a network policy that fails closed; retrying with the next change", "policy", name, "err", err)
				continue
			}
			r.reported[name] = why
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.reported)) {
		if _, ok := failed[name]; ok {
			continue
		}
		if ns, n, _ := strings.Cut(name, "/"); r.uid(ns, n) == "" {
			delete(r.reported, name) // deleted: nothing to post on
			continue
		}
		if err := r.event(ctx, name, corev1.EventTypeNormal, ReasonEnforced, fmt.Sprintf("node %s enforces this policy as written again", r.node)); err != nil {
			r.log.Warn("post an event on a network policy enforced again", "policy", name, "err", err)
			continue
		}
		delete(r.reported, name)
	}
}

// event posts one Event on the policy namespace/name.
func (r *Reporter) event(ctx context.Context, policy, typ, reason, message string) error {
	ns, name, ok := strings.Cut(policy, "/")
	if !ok {
		return fmt.Errorf("policy %q: want namespace/name", policy)
	}
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy",
			Namespace: ns, Name: name, UID: r.uid(ns, name),
		},
		Reason: reason, Message: message, Type: typ,
		Source:         corev1.EventSource{Component: "lockstep-agent", Host: r.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "lockstep.dev/agent", ReportingInstance: "lockstep-agent-" + r.node,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.core.Post().Namespace(ns).Resource("events").Body(ev).Do(ctx).Error(); err != nil {
		return fmt.Errorf("create event on networkpolicy %s: %w", policy, err)
	}
	return nil
}
