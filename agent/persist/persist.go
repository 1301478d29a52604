package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"
	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// FileName is the state file inside the agent's state directory.
const FileName = "state.db"

// schemaVersion is written into new files; a file with another version is
// refused rather than misread.
const schemaVersion = "1"

// formatMarker, under keyFormat in the meta bucket, says a bbolt file is a
// lockstep agent's state file. It is written when the file is created; a
// file without it is refused unless it has the exact shape the agents
// before the marker wrote (see check).
const formatMarker = "lockstep agent state"

var (
	bucketMeta      = []byte("meta")
	bucketEndpoints = []byte("endpoints")
	bucketCleanups  = []byte("cleanups")
	keyVersion      = []byte("schema-version")
	keyDataplane    = []byte("dataplane")
	keyFormat       = []byte("format")
)

// DB is the agent's state file.
type DB struct {
	bolt *bolt.DB
	path string
	// commit commits a bbolt write transaction: tx.Commit, or a fault a
	// test injects.
	commit func(*bolt.Tx) error

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// onWrite, when set, is told how long each write that reached the
	// file took; writes counts them.
	onWrite func(time.Duration)
	writes  atomic.Uint64
}

// OnWrite registers fn, told the duration of every write Persist makes
// (the state file's write latency metric). Call it before the first write.
func (db *DB) OnWrite(fn func(time.Duration)) { db.onWrite = fn }

// hooks are the faults tests inject into Open; the zero value is bbolt.
type hooks struct {
	openFile func(string, int, os.FileMode) (*os.File, error)
	commit   func(*bolt.Tx) error
}

// Open opens DIR/state.db, creating it (and DIR) when it does not exist.
// It fails after lockTimeout when another process holds the file.
//
// An existing file is checked before anything writes to it (see check):
// an empty, truncated, corrupt or foreign file, or one of another schema
// version, is refused and left exactly as it was, each with its own error
// (ErrEmptyStateFile, ErrTruncated, ErrCorrupt, ErrForeignStateFile,
// ErrSchemaVersion). A file or directory the agent may not write is
// ErrReadOnly, never ErrCorrupt: moving it aside would lose every
// allocation. A new file is built next to its final name and linked into
// place once complete, so a crash never leaves a half-made state.db.
func Open(dir string, lockTimeout time.Duration) (*DB, error) {
	return open(dir, lockTimeout, hooks{})
}

func open(dir string, lockTimeout time.Duration, h hooks) (*DB, error) {
	path := filepath.Join(dir, FileName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if notWritable(err) {
			return nil, readOnly(path, fmt.Errorf("create state directory %s: %w", dir, err), false)
		}
		return nil, fmt.Errorf("create state directory %s: %w", dir, err)
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := create(path, lockTimeout); err != nil {
			return nil, err
		}
		info, err = os.Stat(path)
	}
	if err != nil {
		if notWritable(err) {
			return nil, readOnly(path, err, true)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, foreign(path, "it is not a regular file ("+info.Mode().Type().String()+")")
	}
	legacy, err := check(path, info.Size(), lockTimeout)
	if err != nil {
		return nil, err
	}
	bdb, err := boltOpen(path, bolt.Options{Timeout: lockTimeout, OpenFile: h.openFile})
	switch {
	case errors.Is(err, ErrLocked) || errors.Is(err, ErrCorrupt):
		return nil, err
	case err != nil && notWritable(err):
		return nil, readOnly(path, err, true)
	case err != nil:
		return nil, corrupt(path, err)
	}
	db := &DB{bolt: bdb, path: path, commit: (*bolt.Tx).Commit, failed: make(chan struct{})}
	if h.commit != nil {
		db.commit = h.commit
	}
	if legacy {
		err = db.update(initBuckets)
	}
	if err != nil {
		bdb.Close()
		if notWritable(err) {
			return nil, readOnly(path, err, true)
		}
		return nil, err
	}
	return db, nil
}

// create makes a new, complete state file at path: built under a
// temporary name, then linked to path, which must not exist yet.
func create(path string, lockTimeout time.Duration) (err error) {
	tmp := path + ".new"
	defer func() {
		if err != nil && notWritable(err) {
			err = readOnly(path, err, false)
		}
	}()
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("create state file %s: %w", path, err)
	}
	bdb, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("create state file %s: %w", path, err)
	}
	defer os.Remove(tmp)
	err = bdb.Update(initBuckets)
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create state file %s: %w", path, err)
	}
	// Link, not rename: an agent that created path meanwhile keeps it,
	// and this one then finds it locked. A file system without hard links
	// gets a rename.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("create state file %s: %w", path, err)
		}
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a new name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync state directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state directory %s: %w", dir, err)
	}
	return nil
}

// initBuckets writes what a lockstep state file holds from its creation:
// its buckets, the format marker and the schema version.
func initBuckets(tx *bolt.Tx) error {
	for _, name := range lockstepBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(keyFormat, []byte(formatMarker)); err != nil {
		return err
	}
	return meta.Put(keyVersion, []byte(schemaVersion))
}

// Path returns the state file's path.
func (db *DB) Path() string { return db.path }

// Close closes the file.
func (db *DB) Close() error { return db.bolt.Close() }

// Failed is closed when a commit to the file has failed. From then on the
// DB refuses every write with the error Err returns, and the agent stops:
// the file may hold a change the store never made visible, and only a
// restart, which reloads the file, makes the two agree again.
func (db *DB) Failed() <-chan struct{} { return db.failed }

// Err returns the error of the first failed commit, or nil.
func (db *DB) Err() error {
	select {
	case <-db.failed:
		return db.failErr
	default:
		return nil
	}
}

// fail records the first failed commit and returns its error.
func (db *DB) fail(err error) error {
	db.failOnce.Do(func() {
		db.failErr = commitFailed(db.path, err)
		close(db.failed)
	})
	return db.failErr
}

// update runs fn in a bbolt write transaction and commits it. An error of
// fn rolls back and leaves the file as it was; a failed commit is fatal to
// the DB (see Failed), and so is a panic inside bbolt, after which neither
// its memory nor the file can be trusted.
func (db *DB) update(fn func(*bolt.Tx) error) (err error) {
	if err := db.Err(); err != nil {
		return err
	}
	tx, err := db.bolt.Begin(true)
	if err != nil {
		return fmt.Errorf("write state file %s: %w", db.path, err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			func() {
				defer func() { _ = recover() }()
				_ = tx.Rollback() // releases the writer lock Close waits for
			}()
			err = db.fail(fmt.Errorf("bbolt: %v", r))
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("write state file %s: %w", db.path, err)
	}
	if err := db.commit(tx); err != nil {
		return db.fail(err)
	}
	return nil
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

// Persist writes the durable part of a store transaction's changes in one
// fsync'd bbolt transaction: the store's Persister (store.NewDurable),
// called by every write transaction's Commit before the store commits. It
// writes nothing, and costs no fsync, when no durable field changed. It
// returns whether it wrote.
func (db *DB) Persist(changes memdb.Changes) (wrote bool, err error) {
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
	start := time.Now()
	err = db.update(func(tx *bolt.Tx) error {
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
		return false, err
	}
	db.writes.Add(1)
	if db.onWrite != nil {
		db.onWrite(time.Since(start))
	}
	return true, nil
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
	err = db.view(func(tx *bolt.Tx) error {
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

// view runs fn in a read transaction, turning a bbolt panic on a damaged
// page, or a fault on the file's mapping, into ErrCorrupt.
func (db *DB) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(db.path, &err, nil)
	return db.bolt.View(fn)
}
