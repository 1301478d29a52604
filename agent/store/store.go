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
	// persister, when set, writes every write transaction's durable
	// changes before the transaction commits (see Txn.Commit).
	persister Persister
}

// Persister makes the durable part of a write transaction's changes
// durable (persist.DB: one fsync'd state-file transaction). It reports
// whether it wrote anything; a transaction that changed no durable table
// costs it nothing.
type Persister interface {
	Persist(changes memdb.Changes) (wrote bool, err error)
}

// New returns an empty store whose commits are visible at once and never
// written anywhere: for tests, `lockstep probe` and benchmarks. The agent
// uses NewDurable. It fails only if the schema is invalid, which is a
// programming error caught by the schema test.
func New() (*Store, error) { return NewDurable(nil) }

// NewDurable returns an empty store whose every write transaction is
// written by p before it commits: no reader ever sees a change the state
// file does not hold. Restoring from the file itself goes through
// RestoreTxn.
func NewDurable(p Persister) (*Store, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	return &Store{db: db, persister: p}, nil
}

// Durable reports whether the store writes every write transaction
// through a Persister before it commits (NewDurable).
func (s *Store) Durable() bool { return s.persister != nil }

// Txn is a store transaction. Helpers take a *Txn so that they compose in
// one transaction; only the caller commits or aborts. The memdb
// transaction underneath is the store package's own: every read and write
// goes through a helper, and every write commits through Commit.
type Txn struct {
	mem *memdb.Txn
	rev uint64
	// persister is the store's, or nil for a read, a restore or a store
	// without one.
	persister Persister
	// writes counts the inserts and deletes made through the Txn.
	writes uint64
}

// ReadTxn opens a read transaction on a consistent snapshot.
func (s *Store) ReadTxn() *Txn { return &Txn{mem: s.db.Txn(false)} }

// WriteTxn opens the write transaction. Only one is open at a time; others
// block. Use as
//
//	txn := s.WriteTxn()
//	defer txn.Abort()
//	... helpers ...
//	if err := txn.Commit(); err != nil { ... }
func (s *Store) WriteTxn() *Txn {
	txn := s.writeTxn()
	txn.persister = s.persister
	return txn
}

// Update runs fn in a write transaction and commits it (through the
// store's Persister, see Txn.Commit); fn's error aborts everything and is
// returned.
func (s *Store) Update(fn func(*Txn) error) error {
	txn := s.WriteTxn()
	defer txn.Abort()
	if err := fn(txn); err != nil {
		return err
	}
	return txn.Commit()
}

// RestoreTxn opens the write transaction for loading what the state file
// already holds: its Commit writes nothing back. Only the start-up restore
// paths use it.
func (s *Store) RestoreTxn() *Txn { return s.writeTxn() }

func (s *Store) writeTxn() *Txn {
	txn := &Txn{mem: s.db.Txn(true)}
	txn.mem.TrackChanges()
	txn.rev = Revision(txn, storeRevisionKey) + 1
	return txn
}

// Abort discards a write transaction's changes, or ends a read
// transaction. It is a no-op after Commit.
func (t *Txn) Abort() { t.mem.Abort() }

// The memdb operations the store's helpers use.
func (t *Txn) first(table, index string, args ...any) (any, error) {
	return t.mem.First(table, index, args...)
}

func (t *Txn) firstWatch(table, index string, args ...any) (<-chan struct{}, any, error) {
	return t.mem.FirstWatch(table, index, args...)
}

func (t *Txn) last(table, index string, args ...any) (any, error) {
	return t.mem.Last(table, index, args...)
}

func (t *Txn) get(table, index string, args ...any) (memdb.ResultIterator, error) {
	return t.mem.Get(table, index, args...)
}

func (t *Txn) lowerBound(table, index string, args ...any) (memdb.ResultIterator, error) {
	return t.mem.LowerBound(table, index, args...)
}

// The writes count themselves (see Writes).
func (t *Txn) insert(table string, obj any) error {
	t.writes++
	return t.mem.Insert(table, obj)
}

func (t *Txn) delete(table string, obj any) error {
	t.writes++
	return t.mem.Delete(table, obj)
}

func (t *Txn) deleteAll(table, index string, args ...any) (int, error) {
	t.writes++
	return t.mem.DeleteAll(table, index, args...)
}

// WatchRevision returns the revision of the last committed write to table
// (the whole store for "") and a channel closed when it changes.
func WatchRevision(txn *Txn, table string) (<-chan struct{}, uint64, error) {
	ch, raw, err := txn.firstWatch(TableRevisions, IndexID, table)
	if err != nil {
		return nil, 0, fmt.Errorf("watch revision of %q: %w", table, err)
	}
	if raw == nil {
		return ch, 0, nil
	}
	return ch, raw.(*TableRevision).Revision, nil
}

// Revision returns the revision this write transaction commits as, or 0 for
// a read transaction.
func (t *Txn) Revision() uint64 { return t.rev }

// Revision returns the revision of the last committed write to table, or of
// the whole store when table is "".
func Revision(txn *Txn, table string) uint64 {
	raw, err := txn.first(TableRevisions, IndexID, table)
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

// touch records that table changed in this transaction.
func (t *Txn) touch(table string) error {
	if t.rev == 0 {
		return errors.New("write helper called on a read transaction")
	}
	for _, name := range []string{table, storeRevisionKey} {
		if err := t.insert(TableRevisions, &TableRevision{Table: name, Revision: t.rev}); err != nil {
			return fmt.Errorf("record revision of %q: %w", name, err)
		}
	}
	return nil
}
