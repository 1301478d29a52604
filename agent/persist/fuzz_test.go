package persist

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// FuzzOpen feeds arbitrary bytes to the agent as its state file: Open,
// the loads and a write after them must never panic, and every refusal
// must be one of the errors the agent tells the operator about. Seeded
// with a realistic file, the fuzzer mostly damages pages a valid meta
// page points to, where bbolt itself would panic or fault.
//
//	go test ./agent/persist/ -run '^$' -fuzz FuzzOpen -fuzztime 1m
func FuzzOpen(f *testing.F) {
	good, _ := realisticFile(f, 20)
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:4096])
	f.Add(good[:highWaterOf(good)-1])
	dir := f.TempDir()
	foreignPath := filepath.Join(dir, "foreign.db")
	bdb, err := bolt.Open(foreignPath, 0o600, nil)
	if err != nil {
		f.Fatal(err)
	}
	_ = bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("admin"))
	})
	bdb.Close()
	foreignFile, err := os.ReadFile(foreignPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(foreignFile)

	f.Fuzz(func(t *testing.T, file []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), file, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(dir, 50*time.Millisecond)
		if err != nil {
			if !knownRefusal(err) {
				t.Fatalf("refused with an error the agent does not explain: %v", err)
			}
			return
		}
		defer db.Close()
		var loadErr error
		if _, err := db.LoadEndpoints(); err != nil {
			loadErr = err
		}
		if _, err := db.LoadBlocks(); err != nil {
			loadErr = err
		}
		if _, err := db.LoadCleanups(); err != nil {
			loadErr = err
		}
		if _, err := db.Dataplane(); err != nil {
			loadErr = err
		}
		if loadErr != nil {
			if !errors.Is(loadErr, ErrCorrupt) {
				t.Fatalf("load: %v, want ErrCorrupt", loadErr)
			}
			return
		}
		s, _ := store.NewDurable(db)
		txn := s.WriteTxn()
		defer txn.Abort()
		if err := store.AttachEndpoint(txn, endpoint("fuzz", "10.244.0.9")); err != nil {
			t.Fatal(err)
		}
		if err := txn.Commit(); err != nil {
			t.Fatalf("write to a file Open accepted: %v", err)
		}
	})
}

func knownRefusal(err error) bool {
	for _, e := range stateErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// highWaterOf is highWater without a test to fail.
func highWaterOf(file []byte) int {
	m0, _ := parseMeta(file)
	m1, _ := parseMeta(file[max(m0.pageSize, 4096):])
	if m1.txid > m0.txid {
		m0 = m1
	}
	return int(m0.pgid * m0.pageSize)
}
