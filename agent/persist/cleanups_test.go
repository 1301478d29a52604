package persist

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// A pending clean-up survives a restart: it is on disk from the commit
// that scheduled it until the commit that finished it.
func TestCleanupsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	s, _ := store.NewDurable(db)
	since := time.Unix(200, 0).UTC()
	for _, b := range []string{"iptables-legacy", "ebpf"} {
		if !write(t, s, db, func(txn *store.Txn) error {
			return store.UpsertCleanup(txn, &store.Cleanup{Backend: b, Reason: "dataplane changed", Since: since})
		}) {
			t.Fatalf("clean-up of %s not written", b)
		}
	}
	write(t, s, db, func(txn *store.Txn) error {
		return store.UpsertCleanup(txn, &store.Cleanup{Backend: "iptables-legacy", Reason: "dataplane changed", Since: since,
			Attempts: 3, LastError: "iptables-legacy-restore: exit status 4", LastAttempt: since.Add(time.Minute)})
	})
	write(t, s, db, func(txn *store.Txn) error { return store.DeleteCleanup(txn, "ebpf") })
	if err := db.SetDataplane("iptables-nft"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	got, err := db.LoadCleanups()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("loaded %d clean-ups, want 1 (the finished one must be gone)", len(got))
	}
	c := got[0]
	if c.Backend != "iptables-legacy" || c.Attempts != 3 || c.LastError == "" || !c.Since.Equal(since) || !c.LastAttempt.Equal(since.Add(time.Minute)) {
		t.Errorf("round trip: got %+v", c)
	}
	if dp, err := db.Dataplane(); err != nil || dp != "iptables-nft" {
		t.Errorf("Dataplane() = %q, %v; want iptables-nft", dp, err)
	}
}

func TestCorruptCleanupRecordIsRefused(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	db.Close()
	path := filepath.Join(dir, FileName)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCleanups).Put([]byte("iptables-nft"), []byte(`{"backend":"ebpf"}`))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	db = openDB(t, dir)
	defer db.Close()
	before, _ := os.ReadFile(path)
	if _, err := db.LoadCleanups(); err == nil {
		t.Fatal("a record stored under another backend's key was accepted")
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Error("loading a corrupt file changed it")
	}
}
