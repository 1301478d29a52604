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

// Commit commits a transaction. A write transaction first records the
// objects it changed in the change log (see ChangesSince), in the same
// commit, so that a reader sees a revision and its changes together, and
// drops the log's rows older than ChangeLogRevisions. It shadows
// memdb.Txn.Commit; every write goes through it.
func (t *Txn) Commit() {
	if t.rev != 0 {
		t.logChanges()
	}
	t.Txn.Commit()
}

func (t *Txn) logChanges() {
	if err := t.recordChanges(); err != nil {
		// Only a broken schema gets here (the schema test covers it); a
		// log missing a revision would silently desynchronise consumers.
		panic(fmt.Sprintf("record the change log of revision %d: %v", t.rev, err))
	}
}

func (t *Txn) recordChanges() error {
	var log []Change
	for _, c := range t.Txn.Changes() {
		if c.Table == TableRevisions || c.Table == TableChanges {
			continue
		}
		log = append(log, Change{Table: c.Table, Before: c.Before, After: c.After})
	}
	if len(log) > 0 {
		// A transaction that changed objects without touching a table
		// keeps the store's revision; the next one commits under the same
		// number.
		raw, err := t.First(TableChanges, IndexID, t.rev)
		if err != nil {
			return err
		}
		if raw != nil {
			log = append(append([]Change(nil), raw.(*changeSet).Changes...), log...)
		}
		if err := t.Insert(TableChanges, &changeSet{Revision: t.rev, Changes: log}); err != nil {
			return err
		}
	}
	if t.rev <= ChangeLogRevisions {
		return nil
	}
	it, err := t.LowerBound(TableChanges, IndexID, uint64(0))
	if err != nil {
		return err
	}
	var old []any
	for raw := it.Next(); raw != nil && raw.(*changeSet).Revision <= t.rev-ChangeLogRevisions; raw = it.Next() {
		old = append(old, raw)
	}
	for _, raw := range old {
		if err := t.Delete(TableChanges, raw); err != nil {
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
	it, err := txn.LowerBound(TableChanges, IndexID, since+1)
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
