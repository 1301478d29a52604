package store

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"
)

// TableCleanups holds the dataplane backends lockstep stopped using and
// still has to remove its state from (seed 002: a clean-up of legacy
// iptables that failed once must be retried, on that backend, until nothing
// is left — and must not be forgotten by a restart).
const TableCleanups = "cleanups"

// Cleanup is one pending clean-up of a dataplane backend. It is durable:
// the agent writes it to its state file in the transaction that records it
// and deletes it only once the backend holds nothing of lockstep's.
type Cleanup struct {
	// Backend names the backend the leftovers live in, with its variant:
	// "iptables-legacy", "iptables-nft", "ebpf".
	Backend string
	// Reason says why the clean-up was scheduled.
	Reason string
	// Since is when it was first scheduled.
	Since time.Time
	// Attempts counts the clean-up runs that did not finish.
	Attempts int
	// LastError is the error of the last attempt; empty before the first.
	LastError string
	// LastAttempt is when the last attempt ended.
	LastAttempt time.Time
	Revisions
}

func cleanupsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableCleanups, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Cleanup]{
			key:  func(c *Cleanup) ([]byte, bool) { return keyBuilder{}.str(c.Backend), true },
			args: stringArgs(1),
		}},
	}}
}

// UpsertCleanup records c, replacing the record of the same backend. The
// caller's c is copied, never stored.
func UpsertCleanup(txn *Txn, c *Cleanup) error {
	if c.Backend == "" {
		return fmt.Errorf("record clean-up: no backend named")
	}
	cp := *c
	old, err := CleanupByBackend(txn, nil, c.Backend)
	if err != nil {
		return err
	}
	if old != nil {
		cp.Revisions = old.Revisions
	}
	cp.stamp(txn.rev)
	if err := txn.insert(TableCleanups, &cp); err != nil {
		return fmt.Errorf("record clean-up of %s: %w", c.Backend, err)
	}
	return txn.touch(TableCleanups)
}

// DeleteCleanup removes the record of backend; a missing one is not an
// error (the clean-up is done either way).
func DeleteCleanup(txn *Txn, backend string) error {
	n, err := txn.deleteAll(TableCleanups, IndexID, backend)
	if err != nil {
		return fmt.Errorf("delete clean-up of %s: %w", backend, err)
	}
	if n == 0 {
		return nil
	}
	return txn.touch(TableCleanups)
}

// CleanupByBackend returns the pending clean-up of backend, or nil.
func CleanupByBackend(txn *Txn, ws memdb.WatchSet, backend string) (*Cleanup, error) {
	return first[*Cleanup](txn, ws, TableCleanups, IndexID, backend)
}

// Cleanups returns every pending clean-up, ordered by backend.
func Cleanups(txn *Txn, ws memdb.WatchSet) ([]*Cleanup, error) {
	return collect[*Cleanup](txn, ws, TableCleanups, IndexID)
}
