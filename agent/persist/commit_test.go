package persist

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

func endpoint(id string, addr string) *store.Endpoint {
	return &store.Endpoint{
		Attachment: store.Attachment{ContainerID: id, IfName: "eth0"},
		Netns:      "/run/netns/" + id, HostIfName: "ls" + id,
		Pod:       store.PodRef{Namespace: "default", Name: id, UID: "u-" + id},
		Addresses: []store.AddressRef{{Pool: "10.244.0.0/24", Addr: netip.MustParseAddr(addr), Bits: 24}},
		OpID:      1, Created: time.Unix(1, 0).UTC(),
	}
}

// TestFailedCommitIsFatal: when bbolt cannot commit, the store does not
// show the change, the DB takes no further write (not even one that would
// succeed), Failed is closed, and the error says what happened. The
// faults: an fsync that fails after bbolt wrote its meta page (the file
// then holds the change the caller was told failed), a file system gone
// read-only, and a full one.
func TestFailedCommitIsFatal(t *testing.T) {
	tests := []struct {
		name  string
		fault func(tx *bolt.Tx) error
		also  error  // a sentinel the error wraps besides ErrCommitFailed
		hint  string // what the error tells the operator
	}{
		{"fsync fails after the meta page is written", func(tx *bolt.Tx) error {
			if err := tx.Commit(); err != nil {
				return err
			}
			return &os.PathError{Op: "fdatasync", Path: "state.db", Err: syscall.EIO}
		}, nil, "restart the agent"},
		{"file system turned read-only", func(tx *bolt.Tx) error {
			_ = tx.Rollback()
			return &os.PathError{Op: "write", Path: "state.db", Err: syscall.EROFS}
		}, ErrReadOnly, "do not move the file aside"},
		{"file system full", func(tx *bolt.Tx) error {
			_ = tx.Rollback()
			return &os.PathError{Op: "write", Path: "state.db", Err: syscall.ENOSPC}
		}, nil, "free space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var faulty bool
			db, err := open(dir, time.Second, hooks{commit: func(tx *bolt.Tx) error {
				if faulty {
					return tc.fault(tx)
				}
				return tx.Commit()
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s, _ := store.NewDurable(db)
			write(t, s, db, func(txn *store.Txn) error { return store.AttachEndpoint(txn, endpoint("a", "10.244.0.2")) })
			if db.Err() != nil {
				t.Fatalf("Err before any fault: %v", db.Err())
			}

			faulty = true
			commit := func(ep *store.Endpoint) error {
				txn := s.WriteTxn()
				defer txn.Abort()
				if err := store.AttachEndpoint(txn, ep); err != nil {
					t.Fatal(err)
				}
				err := txn.Commit()
				return err
			}
			err = commit(endpoint("b", "10.244.0.3"))
			if !errors.Is(err, ErrCommitFailed) || (tc.also != nil && !errors.Is(err, tc.also)) {
				t.Fatalf("failed commit: %v, want ErrCommitFailed (and %v)", err, tc.also)
			}
			for _, msg := range []string{db.Path(), tc.hint} {
				if !contains(err, msg) {
					t.Errorf("error does not say %q: %v", msg, err)
				}
			}
			if ep, _ := store.EndpointByAttachment(s.ReadTxn(), nil, store.Attachment{ContainerID: "b", IfName: "eth0"}); ep != nil {
				t.Error("the store shows the change whose commit failed")
			}
			select {
			case <-db.Failed():
			default:
				t.Fatal("Failed not closed after a failed commit")
			}

			faulty = false
			if err := commit(endpoint("c", "10.244.0.4")); !errors.Is(err, ErrCommitFailed) {
				t.Fatalf("a write after a failed commit: %v, want ErrCommitFailed", err)
			}
			if ep, _ := store.EndpointByAttachment(s.ReadTxn(), nil, store.Attachment{ContainerID: "c", IfName: "eth0"}); ep != nil {
				t.Error("the store took a write after a failed commit")
			}
			if err := db.SetDataplane("ebpf"); !errors.Is(err, ErrCommitFailed) {
				t.Errorf("SetDataplane after a failed commit: %v, want ErrCommitFailed", err)
			}
			if !errors.Is(db.Err(), ErrCommitFailed) {
				t.Errorf("Err: %v", db.Err())
			}
		})
	}
}

// TestFailedWriteBeforeCommitIsNotFatal: a write bbolt refuses before it
// commits anything (here a key too large) leaves file and store as they
// were, so the DB goes on.
func TestFailedWriteBeforeCommitIsNotFatal(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	s, _ := store.NewDurable(db)
	txn := s.WriteTxn()
	ep := endpoint("a", "10.244.0.2")
	ep.ContainerID = string(make([]byte, bolt.MaxKeySize+1))
	if err := store.AttachEndpoint(txn, ep); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(); err == nil || errors.Is(err, ErrCommitFailed) {
		t.Fatalf("oversized key: %v, want a non-fatal error", err)
	}
	txn.Abort()
	if db.Err() != nil {
		t.Fatalf("Err after a refused write: %v", db.Err())
	}
	write(t, s, db, func(txn *store.Txn) error { return store.AttachEndpoint(txn, endpoint("b", "10.244.0.3")) })
}

// TestReadOnlyIsNotCorruption: a state file the agent may not open for
// writing is ErrReadOnly, with the advice to keep it, whether the file
// system refuses (EROFS) or permissions do (EACCES).
func TestReadOnlyIsNotCorruption(t *testing.T) {
	good, _ := realisticFile(t, 5)
	for _, errno := range []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			write0(t, path, good)
			_, err := open(dir, time.Second, hooks{openFile: func(name string, flag int, _ os.FileMode) (*os.File, error) {
				if flag&(os.O_RDWR|os.O_WRONLY) != 0 {
					return nil, &os.PathError{Op: "open", Path: name, Err: errno}
				}
				return os.OpenFile(name, flag, 0)
			}})
			checkRefusal(t, err, ErrReadOnly, path)
			if !contains(err, "do not move the file aside") {
				t.Errorf("error does not warn against moving the file: %v", err)
			}
		})
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
