// Package endpoints owns the life cycle of pod network attachments on a
// node: reserving addresses on ADD, confirming or rolling back the ADD,
// releasing on DEL and GC, and restoring everything from the state file on
// start.
//
// Every change is one store write transaction whose durable part is written
// to the state file before the transaction commits and before the caller
// gets an answer (see package persist). An address is therefore never
// handed out twice across a crash, and a release is never forgotten.
// Changes that arrive while one is being written are committed together
// (group commit): one committer at a time runs every queued change, in
// order, in one store transaction and writes them with one fsync, so a
// burst of ADDs does not queue behind one fsync each. A change that fails
// is left out of its group and fails alone; one that cannot start before
// its deadline fails with CodeTryAgainLater, having changed nothing.
//
// ADD is two calls, Add and Confirm, with the netlink wiring in between
// (agent/podnet does all three for the plugin's one request). The endpoint
// is Pending from Add to Confirm. A DEL that arrives meanwhile marks it
// Cancelled and waits (bounded) until the ADD has rolled back through Abort;
// the ADD's Confirm then fails with api.CodeCancelled. So ADD and DEL of one
// attachment are serialised and the DEL wins, and the address is not reused
// while the cancelled ADD may still hold routes to it.
//
// ADD allocates only from pools that are not draining, and checks that in
// its write transaction. Standalone, the pools are the configured ones;
// in Kubernetes mode (Config.PoolsFromStore) they are whatever the store
// holds, one per block of the node's NodeIPAM, and agent/nodeipam drains a
// block in its own write transaction when the operator wants it back: an
// ADD commits either before that (and the block is not given back) or
// after (and does not allocate from it).
//
// Endpoints go without a DEL of their own through one function,
// ReleaseTxn, with a predicate: the CNI GC verb frees what the runtime no
// longer lists, the orphan reconcile (ReleaseOrphans, Orphaned) frees what
// no pod owns any more by a pod list newer than the endpoint, and
// agent/nodeipam frees such orphans with the block it drops.
package endpoints
