// Package store is the agent's single source of node state: one
// go-memdb database holding IP pools, address allocations and endpoints,
// the node's address blocks and pending clean-ups, and the Kubernetes
// objects the dataplane is compiled from: namespaces, pods with their
// identities, policies with their selectors, Services and EndpointSlices.
//
// Everything that must change together changes in one write transaction.
// Write helpers are small functions named fooTxn-style (InsertEndpoint,
// DeleteAllocation, ...) that take a *Txn, so a caller composes them and
// commits once; nothing commits behind the caller's back. Stored objects are
// immutable once inserted: copy, modify, re-insert.
//
// Indexers are hand-written and typed (see index.go) rather than
// reflection-based, because allocations are hot and their keys are
// compound: an allocation is identified by (pool, address) and found by
// (container ID, interface name) — never by an address string alone, which
// is how two pools or two incarnations of a block get confused.
//
// Every write transaction carries a store revision; each table records the
// revision of its last change and each object the revisions that created
// and last modified it, so readers can tell "what changed since" and later
// reconcilers can compare revisions instead of guessing from time.
//
// Readers pass a memdb.WatchSet to the read helpers to block until the rows
// they looked at change.
package store
