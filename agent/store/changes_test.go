package store

import (
	"errors"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestChangesSince: every committed write lands in the change log with
// the objects before and after, in commit order; a reader sees the changes
// of exactly the revisions its snapshot holds; an aborted transaction
// leaves nothing.
func TestChangesSince(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return UpsertPod(txn, pod("x", "a", map[string]string{"app": "web"})) })
	rev1 := Revision(s.ReadTxn(), "")
	commit(t, s, func(txn *Txn) error { return UpsertPolicy(txn, allowFrom("x", "p", map[string]string{"app": "web"})) })
	before := s.ReadTxn() // a reader of revision 2
	commit(t, s, func(txn *Txn) error { return DeletePod(txn, "x", "a") })
	aborted := s.WriteTxn()
	if err := UpsertPod(aborted, pod("x", "b", nil)); err != nil {
		t.Fatal(err)
	}
	aborted.Abort()

	tables := func(cs []Change) map[string]int {
		m := map[string]int{}
		for _, c := range cs {
			m[c.Table]++
		}
		return m
	}
	all, err := ChangesSince(s.ReadTxn(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := tables(all)
	// Pod inserted then deleted, its identity created then deleted, the
	// policy and its two selectors inserted; nothing of the aborted write.
	want := map[string]int{TablePods: 2, TableIdentities: 2, TablePolicies: 1, TableSelectors: 2}
	if len(got) != len(want) {
		t.Fatalf("tables changed: got %v, want %v", got, want)
	}
	for table, n := range want {
		if got[table] != n {
			t.Errorf("%s: %d changes, want %d (all: %v)", table, got[table], n, got)
		}
	}
	first, last := all[0], all[len(all)-1]
	if first.Table != TablePods && first.Table != TableIdentities || first.Before != nil || first.After == nil {
		t.Errorf("first change %+v, want the insert of revision 1", first)
	}
	if p, ok := last.Before.(*Pod); last.Table == TablePods && (!ok || p.Object.Name != "a" || last.After != nil) {
		t.Errorf("last pod change %+v, want the delete of x/a", last)
	}

	since1, err := ChangesSince(before, rev1)
	if err != nil {
		t.Fatal(err)
	}
	if got := tables(since1); got[TablePods] != 0 || got[TablePolicies] != 1 {
		t.Errorf("a reader of revision %d since %d: %v, want the policy's changes only", Revision(before, ""), rev1, got)
	}
	if cs, err := ChangesSince(s.ReadTxn(), Revision(s.ReadTxn(), "")); err != nil || len(cs) != 0 {
		t.Errorf("changes since the current revision: %v, %v; want none", cs, err)
	}
	if _, err := s.ReadTxn().get(TableChanges, IndexID, 1); err == nil {
		t.Error("change log lookup with an int: want error")
	}
}

// TestChangeLogTrimmed: the log keeps ChangeLogRevisions revisions; a
// consumer further behind is told to read the whole store.
func TestChangeLogTrimmed(t *testing.T) {
	s := mustStore(t)
	for i := range ChangeLogRevisions + 20 {
		commit(t, s, func(txn *Txn) error {
			return UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: "x", Labels: map[string]string{"i": string(rune('a' + i%26))}}})
		})
	}
	txn := s.ReadTxn()
	rev := Revision(txn, "")
	if _, err := ChangesSince(txn, 1); !errors.Is(err, ErrChangesTrimmed) {
		t.Errorf("changes since revision 1 of %d: got %v, want ErrChangesTrimmed", rev, err)
	}
	cs, err := ChangesSince(txn, rev-10)
	if err != nil || len(cs) != 10 {
		t.Errorf("changes of the last 10 revisions: %d, %v; want 10", len(cs), err)
	}
	it, err := txn.lowerBound(TableChanges, IndexID, uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		rows++
	}
	if rows > ChangeLogRevisions {
		t.Errorf("change log holds %d revisions, want at most %d", rows, ChangeLogRevisions)
	}
}

// TestPending: a write transaction tells what it has changed so far, as
// its commit will log it; a read transaction has changed nothing.
func TestPending(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return UpsertPod(txn, pod("x", "a", nil)) })
	if got := s.ReadTxn().Pending(); got != nil {
		t.Errorf("read transaction: Pending = %v, want nil", got)
	}
	txn := s.WriteTxn()
	defer txn.Abort()
	if got := txn.Pending(); len(got) != 0 {
		t.Errorf("new write transaction: Pending = %v, want none", got)
	}
	if err := DeletePod(txn, "x", "a"); err != nil {
		t.Fatal(err)
	}
	var pods []Change
	for _, c := range txn.Pending() {
		if c.Table == TableRevisions || c.Table == TableChanges {
			t.Errorf("Pending holds a change of the store's own table %s", c.Table)
		}
		if c.Table == TablePods {
			pods = append(pods, c)
		}
	}
	if len(pods) != 1 || pods[0].After != nil || pods[0].Before.(*Pod).Object.Name != "a" {
		t.Fatalf("pod changes pending: %+v, want the delete of x/a", pods)
	}
}
