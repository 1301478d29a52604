package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-memdb"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"lockstep.dev/lockstep/agent/store"
)

// FileName is the state file inside the agent's state directory.
const FileName = "state.db"

// schemaVersion is written into new files; a file with another version is
// refused rather than misread.
const schemaVersion = "1"

var (
	bucketMeta      = []byte("meta")
	bucketEndpoints = []byte("endpoints")
	bucketCleanups  = []byte("cleanups")
	keyVersion      = []byte("schema-version")
	keyDataplane    = []byte("dataplane")
)

// DB is the agent's state file.
type DB struct {
	bolt *bolt.DB
	path string
}

// Open opens or creates DIR/state.db. It fails after lockTimeout when
// another process holds the file.
func Open(dir string, lockTimeout time.Duration) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open state file %s: another process (a second lockstep agent?) holds it", path)
	}
	if err != nil {
		return nil, corrupt(path, err)
	}
	db := &DB{bolt: bdb, path: path}
	if err := db.init(); err != nil {
		bdb.Close()
		return nil, err
	}
	return db, nil
}

// Path returns the state file's path.
func (db *DB) Path() string { return db.path }

// Close closes the file.
func (db *DB) Close() error { return db.bolt.Close() }

func (db *DB) init() (err error) {
	defer recoverCorrupt(db.path, &err)
	return db.bolt.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return corrupt(db.path, err)
		}
		for _, name := range [][]byte{bucketEndpoints, bucketCleanups, bucketBlocks} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return corrupt(db.path, err)
			}
		}
		switch v := meta.Get(keyVersion); {
		case v == nil:
			return meta.Put(keyVersion, []byte(schemaVersion))
		case string(v) != schemaVersion:
			return fmt.Errorf("open state file %s: schema version %q, this agent reads %q; use a matching lockstep version", db.path, v, schemaVersion)
		}
		return nil
	})
}

// endpointRecord is the durable part of a store.Endpoint.
type endpointRecord struct {
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	Netns       string          `json:"netns"`
	HostIfName  string          `json:"hostIfName"`
	Pod         store.PodRef    `json:"pod"`
	Addresses   []addressRecord `json:"addresses"`
	OpID        uint64          `json:"opID"`
	Created     time.Time       `json:"created"`
}

type addressRecord struct {
	Pool string     `json:"pool"`
	Addr netip.Addr `json:"addr"`
	Bits int        `json:"bits"`
}

func recordOf(e *store.Endpoint) endpointRecord {
	r := endpointRecord{
		ContainerID: e.ContainerID, IfName: e.IfName, Netns: e.Netns, HostIfName: e.HostIfName,
		Pod: e.Pod, OpID: e.OpID, Created: e.Created,
	}
	for _, a := range e.Addresses {
		r.Addresses = append(r.Addresses, addressRecord{Pool: a.Pool, Addr: a.Addr, Bits: a.Bits})
	}
	return r
}

func (r endpointRecord) endpoint() *store.Endpoint {
	e := &store.Endpoint{
		Attachment: store.Attachment{ContainerID: r.ContainerID, IfName: r.IfName},
		Netns:      r.Netns, HostIfName: r.HostIfName, Pod: r.Pod, OpID: r.OpID, Created: r.Created,
		State: store.EndpointReady,
	}
	for _, a := range r.Addresses {
		e.Addresses = append(e.Addresses, store.AddressRef{Pool: a.Pool, Addr: a.Addr, Bits: a.Bits})
	}
	return e
}

func endpointKey(att store.Attachment) []byte {
	return []byte(att.ContainerID + "\x00" + att.IfName)
}

// Apply writes the durable part of a store transaction's changes in one
// fsync'd bbolt transaction. It writes nothing, and costs no fsync, when no
// durable field changed. It returns whether it wrote.
func (db *DB) Apply(changes memdb.Changes) (wrote bool, err error) {
	var puts []put
	for _, ch := range changes {
		var p *put
		var err error
		switch ch.Table {
		case store.TableEndpoints:
			p, err = endpointPut(ch)
		case store.TableCleanups:
			p, err = cleanupPut(ch)
		case store.TableBlocks:
			p, err = blockPut(ch)
		}
		if err != nil {
			return false, err
		}
		if p != nil {
			puts = append(puts, *p)
		}
	}
	if len(puts) == 0 {
		return false, nil
	}
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		for _, p := range puts {
			b := tx.Bucket(p.bucket)
			var err error
			if p.value == nil {
				err = b.Delete(p.key)
			} else {
				err = b.Put(p.key, p.value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("write state file %s: %w", db.path, err)
	}
	return true, nil
}

// Commit writes txn's durable changes (see Apply), then commits txn: a
// change is on disk before any reader of the store can see it. On error
// txn is left open for the caller to abort. It returns whether it wrote.
func (db *DB) Commit(txn *store.Txn) (wrote bool, err error) {
	wrote, err = db.Apply(txn.Changes())
	if err != nil {
		return false, err
	}
	txn.Commit()
	return wrote, nil
}

// put is one key to write (value != nil) or delete in a bucket.
type put struct {
	bucket, key, value []byte
}

// endpointPut is the write a change of the endpoints table needs, or nil
// when no durable field changed.
func endpointPut(ch memdb.Change) (*put, error) {
	before, _ := ch.Before.(*store.Endpoint)
	after, _ := ch.After.(*store.Endpoint)
	switch {
	case after == nil && before != nil:
		return &put{bucket: bucketEndpoints, key: endpointKey(before.Attachment)}, nil
	case after != nil:
		value, err := json.Marshal(recordOf(after))
		if err != nil {
			return nil, fmt.Errorf("encode endpoint %s/%s: %w", after.ContainerID, after.IfName, err)
		}
		if before != nil {
			old, _ := json.Marshal(recordOf(before))
			if bytes.Equal(old, value) {
				return nil, nil
			}
		}
		return &put{bucket: bucketEndpoints, key: endpointKey(after.Attachment), value: value}, nil
	}
	return nil, nil
}

// LoadEndpoints returns every endpoint in the file, each Ready.
func (db *DB) LoadEndpoints() (out []*store.Endpoint, err error) {
	defer recoverCorrupt(db.path, &err)
	err = db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEndpoints).ForEach(func(k, v []byte) error {
			var r endpointRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return corrupt(db.path, fmt.Errorf("endpoint record %q: %w", k, err))
			}
			if !bytes.Equal(k, endpointKey(store.Attachment{ContainerID: r.ContainerID, IfName: r.IfName})) {
				return corrupt(db.path, fmt.Errorf("endpoint record %q holds attachment %s/%s", k, r.ContainerID, r.IfName))
			}
			out = append(out, r.endpoint())
			return nil
		})
	})
	return out, err
}

// ErrCorrupt marks a state file that cannot be read.
var ErrCorrupt = errors.New("state file unreadable")

func corrupt(path string, err error) error {
	return fmt.Errorf("read state file %s: %w: %w; the agent will not start on it and has not changed it: "+
		"keep it for inspection, move it aside to start with no allocations (pods on this node then need re-creating)",
		path, ErrCorrupt, err)
}

// recoverCorrupt turns a bbolt panic on a damaged page into an error.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = corrupt(path, fmt.Errorf("%v", r))
	}
}
