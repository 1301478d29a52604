package persist

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// guard turns a panic, or a fault on the file's mapping, inside bbolt into
// ErrCorrupt; closeFile, when set, releases the file and its lock that a
// bolt.Open cut short by the panic never returned. It is deferred by every
// function that reads the file through bbolt.
func guard(path string, err *error, closeFile func()) {
	r := recover()
	if r == nil {
		return
	}
	if closeFile != nil {
		closeFile()
	}
	*err = corrupt(path, fmt.Errorf("bbolt: %v", r))
}

// boltOpen opens path with bbolt, turning a panic while bbolt loads the
// file into ErrCorrupt and an expired lock wait into ErrLocked. Other
// errors come back as bbolt returned them.
func boltOpen(path string, opts bolt.Options) (bdb *bolt.DB, err error) {
	var file *os.File
	openFile := opts.OpenFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := openFile(name, flag, perm)
		file = f
		return f, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(path, &err, func() {
		if file != nil {
			file.Close()
		}
	})
	bdb, err = bolt.Open(path, 0o600, &opts)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open state file %s: %w: is a second lockstep agent running?", path, ErrLocked)
	}
	return bdb, err
}

// check decides, without writing a byte, whether the existing file at path
// is a lockstep state file the agent may open for writing. It reads the
// file's pages itself (see checkPages), so that damage is found here and
// not by bbolt in the middle of a write, then opens it read-only to see
// whose it is.
//
// A file is lockstep's when its meta bucket holds the format marker that
// every file has carried since the marker was introduced. A file without
// the marker is recognised as written by an earlier agent when it has
// exactly that agent's shape: root buckets only among meta, endpoints,
// cleanups and blocks, and a meta bucket holding schema version 1 and
// nothing but the schema version and the dataplane. legacy reports such a file: Open adds
// the marker to it. Anything else is foreign. Any readable file of another
// schema version is refused with ErrSchemaVersion.
func check(path string, size int64, lockTimeout time.Duration) (legacy bool, err error) {
	if size == 0 {
		return false, emptyFile(path)
	}
	f, err := os.Open(path)
	if err != nil {
		if notWritable(err) {
			return false, readOnly(path, err, true)
		}
		return false, corrupt(path, err)
	}
	// An agent committing to the file while its pages are read would make
	// a sound file look corrupt: read them under a reader's lock, which a
	// writer's exclusive one excludes, and held until bbolt has its own.
	defer f.Close()
	switch locked, err := lockShared(f, lockTimeout); {
	case err != nil:
		return false, fmt.Errorf("lock state file %s: %w", path, err)
	case !locked:
		return false, fmt.Errorf("open state file %s: %w: is a second lockstep agent running?", path, ErrLocked)
	}
	if err := checkPages(path, f, size); err != nil {
		return false, err
	}
	bdb, err := boltOpen(path, bolt.Options{ReadOnly: true, Timeout: lockTimeout, PreLoadFreelist: true})
	if errors.Is(err, ErrLocked) || errors.Is(err, ErrCorrupt) {
		return false, err
	}
	if err != nil {
		if notWritable(err) {
			return false, readOnly(path, err, true)
		}
		return false, corrupt(path, err)
	}
	defer bdb.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(path, &err, nil)
	err = bdb.View(func(tx *bolt.Tx) error {
		var oerr error
		legacy, oerr = owner(path, tx)
		return oerr
	})
	return legacy, err
}

// lockstepBuckets are the root buckets a lockstep state file holds.
var lockstepBuckets = [][]byte{bucketMeta, bucketEndpoints, bucketCleanups, bucketBlocks}

// owner tells a lockstep state file from a foreign one; see check.
func owner(path string, tx *bolt.Tx) (legacy bool, err error) {
	var names []string
	err = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, fmt.Sprintf("%q", name))
		return nil
	})
	if err != nil {
		return false, err
	}
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		if len(names) == 0 {
			return false, foreign(path, "it holds no buckets")
		}
		return false, foreign(path, "it has no meta bucket (its buckets: "+listOf(names)+")")
	}
	marker := meta.Get(keyFormat)
	if marker != nil && string(marker) != formatMarker {
		return false, foreign(path, fmt.Sprintf("its format is %q, not %q", marker, formatMarker))
	}
	if marker == nil {
		for _, n := range names {
			if !slices.ContainsFunc(lockstepBuckets, func(b []byte) bool { return fmt.Sprintf("%q", b) == n }) {
				return false, foreign(path, "it has no lockstep format marker and holds bucket "+n)
			}
		}
		err := meta.ForEach(func(k, _ []byte) error {
			if string(k) != string(keyVersion) && string(k) != string(keyDataplane) {
				return foreign(path, fmt.Sprintf("it has no lockstep format marker and its meta bucket holds key %q", k))
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		if meta.Get(keyVersion) == nil {
			return false, foreign(path, "it has no lockstep format marker and no schema version")
		}
	}
	if v := meta.Get(keyVersion); string(v) != schemaVersion {
		return false, fmt.Errorf("open state file %s: %w: version %q, this agent reads %q; %s: run the lockstep release that wrote it",
			path, ErrSchemaVersion, v, schemaVersion, keepsFile)
	}
	return marker == nil, nil
}

func listOf(names []string) string {
	if len(names) > 5 {
		names = append(names[:5:5], "…")
	}
	return strings.Join(names, ", ")
}
