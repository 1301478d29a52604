// Package routes programs the node's routes to the pod address blocks of
// every other node, so pods reach each other across nodes without an
// overlay: a packet for a pod on node B leaves node A's namespace through
// the route "B's block via B's InternalIP", and B's own per-pod routes
// (set by the CNI plugin) deliver it.
//
// The work is split in two. [Desired] is pure: from the other nodes'
// addresses and blocks ([Peer], computed by the Kubernetes source from Node
// and NodeIPAM objects) it computes the routes the node should have.
// [Apply] and [Manager] make the kernel's main routing table agree, in the
// agent's own network namespace (the node's).
//
// # Only lockstep's routes
//
// Every route lockstep adds carries the route protocol number [Protocol]
// (`ip route show proto 108`). Apply lists and deletes only routes of that
// protocol, and adds new ones with NLM_F_EXCL, so a route someone else put
// on the node for the same destination (an administrator's static route,
// another CNI's) is never replaced or deleted: the conflict is reported and
// lockstep's route is left out until the other one is gone.
package routes
