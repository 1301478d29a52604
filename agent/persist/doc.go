// Package persist keeps the agent's durable state in a bbolt file, so a
// SIGKILL at any moment never loses an allocation or a release.
//
// The agent writes through it from inside a store write transaction: it
// hands Apply the transaction's tracked changes, Apply writes the durable
// ones in one fsync'd bbolt transaction, and only then does the agent
// commit the store and answer the caller. So nothing is ever visible in
// memory, or promised to a plugin, that is not already on disk.
//
// Only what must survive a restart is written: an endpoint's identity, pod,
// host interface and addresses. Volatile fields (life-cycle state,
// deadlines, revisions) are not, so confirming an ADD costs no fsync; a
// restored endpoint comes back Ready.
//
// A file that cannot be trusted is never repaired, replaced or adopted:
// Open checks an existing file before anything writes to it, reading every
// page its last commit reaches without bbolt (which panics, or dies of
// SIGBUS, on a missing or malformed page) and then whose file it is. An
// empty, truncated, corrupt or foreign file, one of another schema, and
// one the agent may not write each fail with their own error (see the
// Err variables), naming the file and saying what the operator can do.
//
// A commit bbolt cannot finish is fatal, not retried: bbolt may have
// written its meta page before the fsync failed, so the file may hold what
// the store never showed. The DB then refuses every write and closes
// Failed; the agent exits, and its restart reloads the file.
package persist
