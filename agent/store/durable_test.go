package store

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/hashicorp/go-memdb"
)

// recordingPersister records what it is asked to persist and fails when
// told to.
type recordingPersister struct {
	calls   int
	changes int
	fail    error
	// sawVisible is set when the store already showed the change while
	// it was being persisted.
	sawVisible bool
	store      *Store
}

func (p *recordingPersister) Persist(changes memdb.Changes) (bool, error) {
	p.calls++
	p.changes += len(changes)
	if p.store != nil {
		if pool, _ := PoolByName(p.store.ReadTxn(), nil, "v4"); pool != nil {
			p.sawVisible = true
		}
	}
	return p.fail == nil, p.fail
}

func TestDurableCommit(t *testing.T) {
	pool := Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.244.0.0/24")}
	tests := []struct {
		name      string
		fail      error
		restore   bool
		wantCalls int
		wantErr   bool
		wantPool  bool
	}{
		{name: "persisted before it is visible", wantCalls: 1, wantPool: true},
		{name: "a failed persist commits nothing", fail: errors.New("disk on fire"), wantCalls: 1, wantErr: true},
		{name: "a restore writes nothing back", restore: true, wantCalls: 0, wantPool: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &recordingPersister{fail: tt.fail}
			s, err := NewDurable(p)
			if err != nil {
				t.Fatal(err)
			}
			p.store = s
			open := s.WriteTxn
			if tt.restore {
				open = s.RestoreTxn
			}
			txn := open()
			defer txn.Abort()
			if err := UpsertPool(txn, pool); err != nil {
				t.Fatal(err)
			}
			err = txn.Commit()
			if (err != nil) != tt.wantErr || (tt.wantErr && !errors.Is(err, tt.fail)) {
				t.Fatalf("Commit: %v, want error %v", err, tt.fail)
			}
			if p.calls != tt.wantCalls {
				t.Errorf("Persist called %d times, want %d", p.calls, tt.wantCalls)
			}
			if p.calls > 0 && p.changes == 0 {
				t.Error("Persist was handed no changes")
			}
			if p.sawVisible {
				t.Error("a reader saw the change while it was being persisted")
			}
			got, _ := PoolByName(s.ReadTxn(), nil, "v4")
			if (got != nil) != tt.wantPool {
				t.Errorf("pool after commit: %v, want present %v", got, tt.wantPool)
			}
			if Revision(s.ReadTxn(), "") != map[bool]uint64{true: 1, false: 0}[tt.wantPool] {
				t.Errorf("store revision %d after commit", Revision(s.ReadTxn(), ""))
			}
		})
	}
}

// TestMemoryStoreCommitsWithoutPersister: New's store (tests, probe,
// benchmarks) commits at once.
func TestMemoryStoreCommitsWithoutPersister(t *testing.T) {
	s, _ := New()
	txn := s.WriteTxn()
	if err := UpsertPool(txn, Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.244.0.0/24")}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, _ := PoolByName(s.ReadTxn(), nil, "v4"); got == nil {
		t.Error("pool not committed")
	}
}
