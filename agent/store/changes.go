package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// TableChanges is the change log: for each of the last ChangeLogRevisions
// revisions, the objects its write transaction inserted, replaced or
// deleted. A consumer that keeps state derived from the store (the
// enforcer's incremental compiler) reads what changed since the revision
// it last saw instead of the whole store.
const TableChanges = "changes"

// ChangeLogRevisions is how many revisions the change log keeps. A
// consumer further behind gets ErrChangesTrimmed and reads the whole store.
const ChangeLogRevisions = 1024

// ErrChangesTrimmed: the change log no longer reaches back to the revision
// asked for; read the whole store instead.
var ErrChangesTrimmed = errors.New("change log trimmed past the revision")

// Change is one object a committed write transaction inserted, replaced or
// deleted: Before is nil for an insert, After nil for a delete. Both are
// the stored objects themselves, immutable like every stored object.
type Change struct {
	Table         string
	Before, After any
}

// changeSet is the change log row of one revision.
type changeSet struct {
	Revision uint64
	Changes  []Change
}

func changesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableChanges, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*changeSet]{
			key:  func(c *changeSet) ([]byte, bool) { return binary.BigEndian.AppendUint64(nil, c.Revision), true },
			args: revisionArgs,
		}},
	}}
}

func revisionArgs(_ bool, args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("index needs one uint64 revision, got %d arguments", len(args))
	}
	rev, ok := args[0].(uint64)
	if !ok {
		return nil, fmt.Errorf("index argument 0: got %T, want uint64", args[0])
	}
	return binary.BigEndian.AppendUint64(nil, rev), nil
}

// Commit commits a write transaction (a read transaction has nothing to
// commit). In a durable store it first has the store's Persister write the
// transaction's durable changes: a change is in the state file before any
// reader of the store can see it, and when that fails the transaction is
// aborted and the error returned. It then records the objects the
// transaction changed in the change log (see ChangesSince), in the same
// commit, so that a reader sees a revision and its changes together, and
// drops the log's rows older than ChangeLogRevisions.
func (t *Txn) Commit() error {
	if t.rev == 0 {
		t.mem.Commit()
		return nil
	}
	if t.persister != nil {
		if _, err := t.persister.Persist(t.mem.Changes()); err != nil {
			t.mem.Abort()
			return fmt.Errorf("commit store revision %d: %w", t.rev, err)
		}
	}
	t.logChanges()
	t.mem.Commit()
	return nil
}

func (t *Txn) logChanges() {
	if err := t.recordChanges(); err != nil {
		// Only a broken schema gets here (the schema test covers it); a
		// log missing a revision would silently desynchronise consumers.
		panic(fmt.Sprintf("record the change log of revision %d: %v", t.rev, err))
	}
}

// Pending returns the objects the write transaction t has inserted,
// replaced or deleted so far, as its Commit will log them (see Change): a
// step that runs inside someone else's transaction (endpoints.Config.Derive)
// tells by it whether there is anything for it to do. Nil for a read
// transaction.
func (t *Txn) Pending() []Change {
	if t.rev == 0 {
		return nil
	}
	var out []Change
	for _, c := range t.mem.Changes() {
		if c.Table == TableRevisions || c.Table == TableChanges {
			continue
		}
		out = append(out, Change{Table: c.Table, Before: c.Before, After: c.After})
	}
	return out
}

func (t *Txn) recordChanges() error {
	log := t.Pending()
	if len(log) > 0 {
		// A transaction that changed objects without touching a table
		// keeps the store's revision; the next one commits under the same
		// number.
		raw, err := t.first(TableChanges, IndexID, t.rev)
		if err != nil {
			return err
		}
		if raw != nil {
			log = append(append([]Change(nil), raw.(*changeSet).Changes...), log...)
		}
		if err := t.insert(TableChanges, &changeSet{Revision: t.rev, Changes: log}); err != nil {
			return err
		}
	}
	if t.rev <= ChangeLogRevisions {
		return nil
	}
	it, err := t.lowerBound(TableChanges, IndexID, uint64(0))
	if err != nil {
		return err
	}
	var old []any
	for raw := it.Next(); raw != nil && raw.(*changeSet).Revision <= t.rev-ChangeLogRevisions; raw = it.Next() {
		old = append(old, raw)
	}
	for _, raw := range old {
		if err := t.delete(TableChanges, raw); err != nil {
			return err
		}
	}
	return nil
}

// ChangesSince returns the changes committed after revision since, up to
// the revision txn reads, oldest first; an object changed twice appears
// twice. It returns ErrChangesTrimmed when the log no longer holds them
// all (since is ChangeLogRevisions or more behind).
func ChangesSince(txn *Txn, since uint64) ([]Change, error) {
	rev := Revision(txn, storeRevisionKey)
	if since >= rev {
		return nil, nil
	}
	// Rows up to (latest commit - ChangeLogRevisions) are gone, and the
	// latest commit is rev or, without a revision bump, rev+1.
	if rev-since >= ChangeLogRevisions-1 {
		return nil, fmt.Errorf("read changes since revision %d (store at %d): %w", since, rev, ErrChangesTrimmed)
	}
	it, err := txn.lowerBound(TableChanges, IndexID, since+1)
	if err != nil {
		return nil, fmt.Errorf("read the change log: %w", err)
	}
	var out []Change
	for raw := it.Next(); raw != nil; raw = it.Next() {
		cs := raw.(*changeSet)
		if cs.Revision > rev {
			break
		}
		out = append(out, cs.Changes...)
	}
	return out, nil
}
