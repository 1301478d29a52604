package persist

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

func openDB(t *testing.T, dir string) *DB {
	t.Helper()
	db, err := Open(dir, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// write runs fn in a write transaction of s, a store durable through db,
// commits it, and reports whether the commit wrote to db.
func write(t *testing.T, s *store.Store, db *DB, fn func(*store.Txn) error) bool {
	t.Helper()
	txn := s.WriteTxn()
	defer txn.Abort()
	if err := fn(txn); err != nil {
		t.Fatal(err)
	}
	before := db.writes.Load()
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	return db.writes.Load() > before
}

func TestApplyAndLoad(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	s, _ := store.NewDurable(db)
	ep := &store.Endpoint{
		Attachment: store.Attachment{ContainerID: "c1", IfName: "eth0"},
		Netns:      "/run/netns/p1", HostIfName: "lsabc",
		Pod:       store.PodRef{Namespace: "default", Name: "web-0", UID: "u1"},
		Addresses: []store.AddressRef{{Pool: "10.244.0.0/24", Addr: netip.MustParseAddr("10.244.0.9"), Bits: 24}},
		State:     store.EndpointPending, OpID: 7, Created: time.Unix(100, 0).UTC(),
	}
	if !write(t, s, db, func(txn *store.Txn) error { return store.AttachEndpoint(txn, ep) }) {
		t.Fatal("new endpoint not written")
	}
	// A state change alone is volatile: no write, no fsync.
	ready := ep.Copy()
	ready.State = store.EndpointReady
	if write(t, s, db, func(txn *store.Txn) error { return store.UpsertEndpoint(txn, ready) }) {
		t.Fatal("volatile state change was written")
	}
	second := ep.Copy()
	second.Attachment.ContainerID, second.HostIfName = "c2", "lsdef"
	second.Addresses = []store.AddressRef{{Pool: "10.244.0.0/24", Addr: netip.MustParseAddr("10.244.0.10"), Bits: 24}}
	write(t, s, db, func(txn *store.Txn) error { return store.AttachEndpoint(txn, second) })
	write(t, s, db, func(txn *store.Txn) error {
		_, err := store.ReleaseEndpoint(txn, second.Attachment)
		return err
	})
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	got, err := db.LoadEndpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("loaded %d endpoints, want 1 (the released one must be gone)", len(got))
	}
	e := got[0]
	if e.Attachment != ep.Attachment || e.Pod != ep.Pod || e.HostIfName != ep.HostIfName || e.Netns != ep.Netns ||
		e.OpID != 7 || !e.Created.Equal(ep.Created) || len(e.Addresses) != 1 || e.Addresses[0] != ep.Addresses[0] {
		t.Fatalf("round trip: got %+v, want %+v", e, ep)
	}
	if e.State != store.EndpointReady {
		t.Fatalf("restored state %v, want ready", e.State)
	}
}

func TestOpenRefusesSecondHolder(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	defer db.Close()
	_, err := Open(dir, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second open: %v", err)
	}
}

func TestCorruptFileIsRefusedAndKept(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"garbage file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt file ", 512)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"undecodable record", func(t *testing.T, path string) {
			db := openDB(t, filepath.Dir(path))
			err := db.bolt.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketEndpoints).Put([]byte("c\x00eth0"), []byte("{truncated"))
			})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
		}},
		{"record under the wrong key", func(t *testing.T, path string) {
			db := openDB(t, filepath.Dir(path))
			err := db.bolt.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketEndpoints).Put([]byte("other\x00eth0"), []byte(`{"containerID":"c","ifName":"eth0"}`))
			})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			tc.setup(t, path)
			before, _ := os.ReadFile(path)

			db, err := Open(dir, 50*time.Millisecond)
			if err == nil {
				_, err = db.LoadEndpoints()
				db.Close()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want ErrCorrupt naming %s", err, path)
			}
			if tc.name == "garbage file" {
				after, _ := os.ReadFile(path)
				if string(before) != string(after) {
					t.Fatal("corrupt file was modified")
				}
			}
		})
	}
}

func TestSchemaVersionMismatch(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	_ = db.bolt.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyVersion, []byte("99")) })
	db.Close()
	if _, err := Open(dir, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "schema version") {
		t.Fatalf("got %v", err)
	}
}
