// Package persist keeps the agent's durable state in a bbolt file, so a
// SIGKILL at any moment never loses an allocation or a release.
//
// A DB is the Persister of the agent's store (store.NewDurable): every
// write transaction's Commit hands Persist its tracked changes, Persist
// writes the durable ones in one fsync'd bbolt transaction, and only then
// does the store commit and the agent answer the caller. There is no other
// way to commit a write, so nothing is ever visible in memory, or promised
// to a plugin, that is not already on disk; the restore paths, which load
// what the file holds, commit through store.RestoreTxn, which writes
// nothing back.
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
