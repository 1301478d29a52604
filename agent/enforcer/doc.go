// Package enforcer turns committed store state into dataplane state.
//
// It is the only writer of the dataplane. Every apply starts from one read
// transaction of the store, so it sees a committed state whole: the pods,
// their addresses and identities, the policies and the selectors they
// reference, the Services and their EndpointSlices, as one transaction left
// them. A backend that changed with a policy in one transaction reaches the
// dataplane with it, in one Apply. It compiles that state and hands
// the result to the [Dataplane] in one call, under one lock. A background
// pass (the periodic resync that repairs drift) goes through the same lock
// and the same kind of snapshot, so it can never remove something an apply
// in progress still needs: the race of seed 000, where a reconcile deleted
// an ipset between "apply sets" and "update pod", has no window to happen
// in.
//
// Compilation is incremental: the enforcer keeps a [policy.Incremental]
// and feeds it, from the store's change log ([store.ChangesSince]), only
// the objects written since the revision it last applied; it reads the
// whole store when the log no longer reaches back that far, and on every
// resync, which so also rebuilds the compiler's state from scratch. The
// result is what [policy.Compile] of a [Snapshot] of the same transaction
// gives. When it is the state applied last, object for object (a change
// that concerns no local endpoint), the dataplane is not called.
//
// A resync also asks a dataplane that is an [AttachChecker] whether every
// attached endpoint, still Ready as the ADD it was attached for wired it,
// still has its hooks (someone may have removed the eBPF filters from a
// host veth), and attaches again those that lost them.
//
// The CNI ADD path calls [Enforcer.EnforceEndpoint] with the revision its
// confirm committed as, and replies only once it returns: the pod's
// policy is in force before the runtime starts the pod's containers. An
// apply serves every ADD confirmed before it began, so a burst of ADDs
// shares applies instead of queueing for the apply lock one apply each.
//
// Run applies a change as soon as it is committed. With a release delay
// (SetReleaseDelay; the agent sets [DefaultReleaseDelay] for the eBPF
// dataplane), it holds back one that only releases endpoints (a CNI DEL,
// a GC, an orphan clean-up) for up to that long, so that it rides with
// the next change: an eBPF apply writes the idle copy only once an RCU
// grace period has passed since the previous flip, and an ADD right after
// a DEL would otherwise wait out the DEL's. What a release takes away
// belongs to pods gone from the node; an address it frees is handed out
// again on this node only by an ADD, whose apply carries the release.
//
// Endpoints are attached by host interface, and an endpoint another ADD
// of its attachment wired anew (a new link under the same name) is
// attached again: the enforcer remembers which ADD (the endpoint's OpID)
// each attach was for. While that ADD runs (the endpoint Pending), the
// old link is not detached: with no state of its own in the eBPF
// dataplane, its new connections are dropped until the ADD deletes it
// (established ones pass until their conntrack entries are flushed).
package enforcer
