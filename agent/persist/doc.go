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
// A file that cannot be read is never repaired or replaced: Open and Load
// fail with an error naming the file, and the operator decides.
package persist
