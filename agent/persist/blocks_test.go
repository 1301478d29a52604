package persist

import (
	"net/netip"
	"testing"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

func block(cidr string, st store.BlockState) *store.Block {
	p := netip.MustParsePrefix(cidr)
	return &store.Block{Name: p.String(), CIDR: p, IPPool: "default", Owner: "uid-a", State: st}
}

// A quarantined block is a promise made to the operator (nothing will be
// allocated from it): it survives a restart, and so does its removal.
func TestBlocksSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	s, _ := store.NewDurable(db)
	if !write(t, s, db, func(txn *store.Txn) error {
		for _, b := range []*store.Block{block("10.244.0.0/26", store.BlockActive), block("10.244.0.64/26", store.BlockActive), block("fd00::/120", store.BlockRetired)} {
			if err := store.UpsertBlock(txn, b); err != nil {
				return err
			}
		}
		return nil
	}) {
		t.Fatal("new blocks not written")
	}
	if !write(t, s, db, func(txn *store.Txn) error {
		return store.UpsertBlock(txn, block("10.244.0.64/26", store.BlockQuarantined))
	}) {
		t.Fatal("quarantine not written")
	}
	if write(t, s, db, func(txn *store.Txn) error {
		return store.UpsertBlock(txn, block("10.244.0.64/26", store.BlockQuarantined))
	}) {
		t.Error("an unchanged block was written again")
	}
	write(t, s, db, func(txn *store.Txn) error { return store.DeleteBlock(txn, "fd00::/120") })
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	got, err := db.LoadBlocks()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]store.BlockState{"10.244.0.0/26": store.BlockActive, "10.244.0.64/26": store.BlockQuarantined}
	if len(got) != len(want) {
		t.Fatalf("loaded %d blocks, want %d", len(got), len(want))
	}
	for _, b := range got {
		if want[b.Name] != b.State || b.Owner != "uid-a" || b.IPPool != "default" || b.CIDR.String() != b.Name {
			t.Errorf("round trip: %+v", b)
		}
	}
}

func TestCorruptBlockRecordIsRefused(t *testing.T) {
	tests := []struct{ name, key, value string }{
		{"undecodable", "10.244.0.0/26", "{"},
		{"under another key", "10.244.0.64/26", `{"cidr":"10.244.0.0/26","state":"active"}`},
		{"unknown state", "10.244.0.0/26", `{"cidr":"10.244.0.0/26","state":"draining"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openDB(t, dir)
			if err := db.bolt.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketBlocks).Put([]byte(tc.key), []byte(tc.value))
			}); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.LoadBlocks(); err == nil {
				t.Fatal("corrupt record accepted")
			}
		})
	}
}
