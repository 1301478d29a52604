package store

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// Sentinel errors returned by the write helpers.
var (
	// ErrAddressInUse: the (pool, address) already belongs to an allocation.
	ErrAddressInUse = errors.New("address already allocated")
	// ErrNotFound: the object the helper was asked to change does not exist.
	ErrNotFound = errors.New("not found")
)

// Store is the agent's in-memory transactional state.
type Store struct {
	db *memdb.MemDB
}

// New returns an empty store. It fails only if the schema is invalid, which
// is a programming error caught by the schema test.
func New() (*Store, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	return &Store{db: db}, nil
}

// Txn is a store transaction. Helpers take a *Txn so that they compose in
// one transaction; only the caller commits or aborts.
type Txn struct {
	*memdb.Txn
	rev uint64
	// writes counts the Inserts and Deletes made through the Txn.
	writes uint64
}

// ReadTxn opens a read transaction on a consistent snapshot.
func (s *Store) ReadTxn() *Txn { return &Txn{Txn: s.db.Txn(false)} }

// WriteTxn opens the write transaction. Only one is open at a time; others
// block. Changes are tracked so the caller can persist exactly what it is
// about to commit. Use as
//
//	txn := s.WriteTxn()
//	defer txn.Abort()
//	... helpers ...
//	txn.Commit()
func (s *Store) WriteTxn() *Txn {
	txn := &Txn{Txn: s.db.Txn(true)}
	txn.TrackChanges()
	txn.rev = Revision(txn, storeRevisionKey) + 1
	return txn
}

// Revision returns the revision this write transaction commits as, or 0 for
// a read transaction.
func (t *Txn) Revision() uint64 { return t.rev }

// Revision returns the revision of the last committed write to table, or of
// the whole store when table is "".
func Revision(txn *Txn, table string) uint64 {
	raw, err := txn.First(TableRevisions, IndexID, table)
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*TableRevision).Revision
}

// Writes counts the inserts and deletes made through t so far. One
// transaction that runs several callers' changes in turn (the agent's
// group commit) tells by it whether a change that failed wrote anything
// before it failed: one that wrote nothing can simply be left out.
func (t *Txn) Writes() uint64 { return t.writes }

// Insert shadows memdb.Txn.Insert to count the write (see Writes).
func (t *Txn) Insert(table string, obj any) error {
	t.writes++
	return t.Txn.Insert(table, obj)
}

// Delete shadows memdb.Txn.Delete to count the write (see Writes).
func (t *Txn) Delete(table string, obj any) error {
	t.writes++
	return t.Txn.Delete(table, obj)
}

// DeleteAll shadows memdb.Txn.DeleteAll to count the write (see Writes).
func (t *Txn) DeleteAll(table, index string, args ...any) (int, error) {
	t.writes++
	return t.Txn.DeleteAll(table, index, args...)
}

// DeletePrefix shadows memdb.Txn.DeletePrefix to count the write (see
// Writes).
func (t *Txn) DeletePrefix(table, index, prefix string) (bool, error) {
	t.writes++
	return t.Txn.DeletePrefix(table, index, prefix)
}

// touch records that table changed in this transaction.
func (t *Txn) touch(table string) error {
	if t.rev == 0 {
		return errors.New("write helper called on a read transaction")
	}
	for _, name := range []string{table, storeRevisionKey} {
		if err := t.Insert(TableRevisions, &TableRevision{Table: name, Revision: t.rev}); err != nil {
			return fmt.Errorf("record revision of %q: %w", name, err)
		}
	}
	return nil
}
