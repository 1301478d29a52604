package persist

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// stateErrors are the refusals Open tells apart; each case must match
// exactly one of them.
var stateErrors = []error{ErrEmptyStateFile, ErrTruncated, ErrCorrupt, ErrForeignStateFile, ErrSchemaVersion, ErrReadOnly, ErrLocked, ErrCommitFailed}

// checkRefusal fails t unless err is want and no other of stateErrors,
// names path, and suggests moving the file aside only when nothing in it
// can be saved.
func checkRefusal(t *testing.T, err, want error, path string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want %v", want)
	}
	for _, e := range stateErrors {
		if got := errors.Is(err, e); got != (e == want) {
			t.Errorf("errors.Is(%v) = %v; error: %v", e, got, err)
		}
	}
	msg := err.Error()
	if !strings.Contains(msg, path) {
		t.Errorf("error does not name %s: %v", path, msg)
	}
	aside := strings.Contains(msg, "move it aside")
	if mayMove := want == ErrCorrupt || want == ErrTruncated; aside != mayMove {
		t.Errorf("suggests moving the file aside: %v, want %v: %v", aside, mayMove, msg)
	}
	if aside && !strings.Contains(msg, "no allocations") {
		t.Errorf("suggests moving the file aside without saying what that loses: %v", msg)
	}
}

// realisticFile writes a state file with what a busy node holds:
// endpoints enough for branch and overflow pages, blocks, clean-ups and a
// dataplane, and returns its bytes and the endpoints in it.
func realisticFile(t testing.TB, endpoints int) ([]byte, int) {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := store.NewDurable(db)
	commit := func(fn func(*store.Txn) error) {
		txn := s.WriteTxn()
		defer txn.Abort()
		if err := fn(txn); err != nil {
			t.Fatal(err)
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	commit(func(txn *store.Txn) error {
		if err := store.UpsertBlock(txn, block("10.244.0.0/22", store.BlockActive)); err != nil {
			return err
		}
		return store.UpsertCleanup(txn, &store.Cleanup{Backend: "iptables-nft", Reason: "dataplane changed", Since: time.Unix(5, 0).UTC()})
	})
	for i := range endpoints {
		commit(func(txn *store.Txn) error {
			return store.AttachEndpoint(txn, &store.Endpoint{
				Attachment: store.Attachment{ContainerID: fmt.Sprintf("%064x", i*7919), IfName: "eth0"},
				Netns:      fmt.Sprintf("/var/run/netns/cni-%08x-0000-0000-0000-%012x", i, i), HostIfName: fmt.Sprintf("ls%08x", i),
				Pod:       store.PodRef{Namespace: "tenant-a", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("uid-%d", i)},
				Addresses: []store.AddressRef{{Pool: "10.244.0.0/22", Addr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), Bits: 22}},
				OpID:      uint64(i) | 1, Created: time.Unix(int64(i), 0).UTC(),
			})
		})
	}
	// A release leaves freed pages on the freelist, as a real node has.
	commit(func(txn *store.Txn) error {
		_, err := store.ReleaseEndpoint(txn, store.Attachment{ContainerID: fmt.Sprintf("%064x", 0), IfName: "eth0"})
		return err
	})
	if err := db.SetDataplane("ebpf"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b, endpoints - 1
}

// boltFile writes a bbolt file built by fn at path, as another program
// (or an agent from before the format marker) would.
func boltFile(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	boltFileWith(t, path, nil, fn)
}

func boltFileWith(t *testing.T, path string, opts *bolt.Options, fn func(tx *bolt.Tx) error) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
}

// buckets returns a bbolt transaction function creating the named
// buckets, each holding the given key and value pairs.
func buckets(contents map[string][]string) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		for name, kv := range contents {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if err := b.Put([]byte(kv[i]), []byte(kv[i+1])); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// TestOpenRefusesWhatIsNotItsOwn: every state file the agent must not
// start on is refused with its own error and left byte for byte as it was.
func TestOpenRefusesWhatIsNotItsOwn(t *testing.T) {
	good, _ := realisticFile(t, 40)
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  error
	}{
		{"zero-length file", func(t *testing.T, path string) { write0(t, path, nil) }, ErrEmptyStateFile},
		{"truncated in its meta page", func(t *testing.T, path string) { write0(t, path, good[:100]) }, ErrTruncated},
		{"truncated after its meta pages", func(t *testing.T, path string) { write0(t, path, good[:3*4096]) }, ErrTruncated},
		{"truncated by one byte of its last page", func(t *testing.T, path string) { write0(t, path, good[:highWater(t, good)-1]) }, ErrTruncated},
		{"not a bbolt file", func(t *testing.T, path string) {
			write0(t, path, []byte(strings.Repeat("not a bolt file ", 512)))
		}, ErrCorrupt},
		{"a page pointing at itself", func(t *testing.T, path string) {
			b := bytes.Clone(good)
			breakRootPage(t, b)
			write0(t, path, b)
		}, ErrCorrupt},
		{"foreign: other buckets", func(t *testing.T, path string) {
			boltFile(t, path, buckets(map[string][]string{"users": {"alice", "admin"}}))
		}, ErrForeignStateFile},
		{"foreign: no buckets at all", func(t *testing.T, path string) {
			boltFile(t, path, func(*bolt.Tx) error { return nil })
		}, ErrForeignStateFile},
		{"foreign: a meta bucket without a schema version", func(t *testing.T, path string) {
			boltFile(t, path, buckets(map[string][]string{"meta": {"created", "yesterday"}, "endpoints": nil}))
		}, ErrForeignStateFile},
		{"foreign: lockstep's buckets and one more, no marker", func(t *testing.T, path string) {
			boltFile(t, path, buckets(map[string][]string{"meta": {"schema-version", "1"}, "endpoints": nil, "jobs": nil}))
		}, ErrForeignStateFile},
		{"foreign: another program's format marker", func(t *testing.T, path string) {
			boltFile(t, path, buckets(map[string][]string{"meta": {"format", "etcd wal", "schema-version", "1"}}))
		}, ErrForeignStateFile},
		{"foreign: written without a freelist", func(t *testing.T, path string) {
			boltFileWith(t, path, &bolt.Options{NoFreelistSync: true}, buckets(map[string][]string{
				"meta": {"format", formatMarker, "schema-version", schemaVersion}, "endpoints": nil, "cleanups": nil, "blocks": nil,
			}))
		}, ErrForeignStateFile},
		{"foreign: a directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, ErrForeignStateFile},
		{"a newer schema", func(t *testing.T, path string) {
			boltFile(t, path, buckets(map[string][]string{"meta": {"format", formatMarker, "schema-version", "2"}}))
		}, ErrSchemaVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			tc.setup(t, path)
			before := snapshot(t, path)

			db, err := Open(dir, 50*time.Millisecond)
			if err == nil {
				db.Close()
			}
			checkRefusal(t, err, tc.want, path)
			if after := snapshot(t, path); after != before {
				t.Error("the refused file was modified")
			}
			if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
				t.Error("a refused start left a new state file behind")
			}
		})
	}
}

// TestTruncatedAtEveryPageBoundary cuts a realistic file at every page
// boundary, and at odd offsets around them: a cut into the pages its last
// commit uses is ErrTruncated, a cut past them loses nothing, and nothing
// panics.
func TestTruncatedAtEveryPageBoundary(t *testing.T) {
	full, endpoints := realisticFile(t, 300)
	hwm := highWater(t, full)
	if hwm < 16*4096 {
		t.Fatalf("the realistic file uses %d bytes, too few for branch pages", hwm)
	}
	var cuts []int
	for n := 0; n <= len(full); n += 4096 {
		cuts = append(cuts, n)
	}
	cuts = append(cuts, 1, 15, 16, 19, 20, 79, 80, 4095, 4097, 6000, 8191, 8193, 12345, hwm-1, hwm+1, len(full)-1)
	for _, n := range cuts {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		write0(t, path, full[:n])
		db, err := Open(dir, 50*time.Millisecond)
		var want error
		switch {
		case n == 0:
			want = ErrEmptyStateFile
		case n < 20:
			want = ErrCorrupt // too short to see a bbolt header in
		case n < hwm:
			want = ErrTruncated
		}
		if want != nil {
			if err == nil {
				db.Close()
			}
			t.Run(fmt.Sprintf("cut at %d", n), func(t *testing.T) { checkRefusal(t, err, want, path) })
			if !bytes.Equal(full[:n], mustRead(t, path)) {
				t.Errorf("cut at %d: the refused file was modified", n)
			}
			continue
		}
		if err != nil {
			t.Errorf("cut at %d, past the %d bytes in use: %v", n, hwm, err)
			continue
		}
		eps, err := db.LoadEndpoints()
		db.Close()
		if err != nil || len(eps) != endpoints {
			t.Errorf("cut at %d, past the %d bytes in use: loaded %d endpoints, want %d (%v)", n, hwm, len(eps), endpoints, err)
		}
	}
}

// TestLegacyFileIsRecognised: a file an agent wrote before the format
// marker existed is the agent's own: it opens, keeps its records, and
// gets the marker.
func TestLegacyFileIsRecognised(t *testing.T) {
	for _, withBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocks bucket %v", withBlocks), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			contents := map[string][]string{
				"meta":      {"schema-version", "1", "dataplane", "ebpf"},
				"endpoints": {"c1\x00eth0", `{"containerID":"c1","ifName":"eth0","addresses":[{"pool":"10.244.0.0/24","addr":"10.244.0.7","bits":24}]}`},
				"cleanups":  nil,
			}
			if withBlocks {
				contents["blocks"] = nil
			}
			boltFile(t, path, buckets(contents))
			db := openDB(t, dir)
			eps, err := db.LoadEndpoints()
			if err != nil || len(eps) != 1 || eps[0].Addresses[0].Addr != netip.MustParseAddr("10.244.0.7") {
				t.Fatalf("loaded %v, %v", eps, err)
			}
			if dp, err := db.Dataplane(); dp != "ebpf" || err != nil {
				t.Fatalf("dataplane %q, %v", dp, err)
			}
			var marker string
			_ = db.bolt.View(func(tx *bolt.Tx) error {
				marker = string(tx.Bucket(bucketMeta).Get(keyFormat))
				return nil
			})
			if marker != formatMarker {
				t.Errorf("format marker %q after open, want %q", marker, formatMarker)
			}
			db.Close()
		})
	}
}

// TestOpenWritesNothingToAGoodFile: opening the agent's own file commits
// nothing, so a check that refuses cannot have been preceded by a write.
func TestOpenWritesNothingToAGoodFile(t *testing.T) {
	good, _ := realisticFile(t, 10)
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write0(t, path, good)
	db := openDB(t, dir)
	db.Close()
	if !bytes.Equal(good, mustRead(t, path)) {
		t.Error("open changed the file")
	}
}

func write0(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot is path's content and mode, to compare before and after.
func snapshot(t *testing.T, path string) string {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.IsDir() {
		return "dir " + info.Mode().String()
	}
	return info.Mode().String() + " " + string(mustRead(t, path))
}

// highWater is the number of bytes the last commit of file uses.
func highWater(t *testing.T, file []byte) int {
	t.Helper()
	m0, ok0 := parseMeta(file)
	m1, ok1 := parseMeta(file[m0.pageSize:])
	if !ok0 || !ok1 {
		t.Fatal("test file has no valid meta pages")
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	return int(m.pgid * m.pageSize)
}

// breakRootPage makes the root page of the last commit a branch pointing
// at itself: bbolt would walk it for ever.
func breakRootPage(t *testing.T, file []byte) {
	t.Helper()
	m0, _ := parseMeta(file)
	m1, _ := parseMeta(file[m0.pageSize:])
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	p := file[m.root*m.pageSize:]
	native.PutUint16(p[8:], pageFlagBranch)
	native.PutUint16(p[10:], 1)
	native.PutUint32(p[pageHeaderSize:], elementSize) // key right after the element
	native.PutUint32(p[pageHeaderSize+4:], 1)
	native.PutUint64(p[pageHeaderSize+8:], m.root)
}

// TestOpenWhileAnotherAgentCommits: a file another agent holds and commits
// to is locked, never corrupt: its pages are read only under a reader's
// lock, so a commit in flight cannot make a sound file look damaged (and
// the operator is never told to move a live file aside).
func TestOpenWhileAnotherAgentCommits(t *testing.T) {
	good, _ := realisticFile(t, 50)
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write0(t, path, good)
	other, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = other.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("endpoints"))
				if err != nil {
					return err
				}
				return b.Put(fmt.Appendf(nil, "churn-%d", i%500), bytes.Repeat([]byte{byte(i)}, 200+i%3000))
			})
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 100 {
		db, err := Open(dir, time.Millisecond)
		if err == nil {
			db.Close()
			t.Fatalf("open %d: succeeded while another agent holds the file", i)
		}
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("open %d: %v, want %v", i, err, ErrLocked)
		}
	}
}
