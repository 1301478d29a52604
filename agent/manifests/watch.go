package manifests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"

	"lockstep.dev/lockstep/internal/watchdog"
)

// maxSettle bounds how long Watch waits for a burst of writes (an editor
// saving, a ConfigMap's symlinks swapping) to end before reading.
const maxSettle = 100 * time.Millisecond

// Watch loads dir, calls fn with the result, and then calls fn again each
// time the manifest files' contents change, until ctx is done; it returns
// ctx.Err(). It is a [Watcher]'s Load and then its Run.
//
// Changes are noticed through inotify (fsnotify) when the directory can be
// watched, and in any case by fingerprinting the files every interval,
// which also covers a directory that appears later or is replaced. After a
// change Watch waits until the files have been quiet for a moment
// (min(interval, 100ms)), then loads them whole.
//
// fn(objs, nil) delivers a complete new set of objects. A load that fails
// calls fn(last, err), where last is the last good set (nil if there was
// none): the caller keeps enforcing it and reports err. Each distinct
// state of the files is delivered once, so a touch that changes nothing,
// or a bad file left as it is, does not call fn again. fn runs on Watch's
// goroutine; Watch waits for it.
func Watch(ctx context.Context, dir string, interval time.Duration, fn func(*Objects, error)) error {
	w := NewWatcher(dir, interval)
	fn(w.Load())
	return w.Run(ctx, fn)
}

// Watcher follows a manifest directory from a state it has read. The
// agent loads the directory before it serves and follows it afterwards:
// the Watcher lets it do both without reading the files twice, and
// without missing an edit made in between.
type Watcher struct {
	dir      string
	interval time.Duration

	last    *Objects // the last good set, nil before one
	lastSum [32]byte // fingerprint of the files last loaded
	loaded  bool
	// heartbeat is beaten by every turn of Run.
	heartbeat *watchdog.Loop
}

// NewWatcher returns a Watcher of dir that fingerprints it every interval
// (a second if interval is not positive).
func NewWatcher(dir string, interval time.Duration) *Watcher {
	if interval <= 0 {
		interval = time.Second
	}
	return &Watcher{dir: dir, interval: interval}
}

// Dir returns the directory w follows.
func (w *Watcher) Dir() string { return w.dir }

// SetHeartbeat makes Run beat hb on every turn (its polls turn it every
// interval), and on hb's Tick; call it before Run. A fn that does not
// return silences hb.
func (w *Watcher) SetHeartbeat(hb *watchdog.Loop) { w.heartbeat = hb }

// Load reads the directory now, as [Load] does, and remembers what it read
// (or the error): Run delivers only changes from there. It returns the
// last good set along with a load error, as Watch's fn receives them.
func (w *Watcher) Load() (*Objects, error) {
	objs, sum, err := load(w.dir)
	w.lastSum, w.loaded = sum, true
	if err == nil {
		w.last = objs
	}
	return w.last, err
}

// Run calls fn each time the files change from what was last loaded (see
// [Watch]), until ctx is done; it returns ctx.Err(). If nothing was loaded
// yet it loads and calls fn first. Run must not be called twice at once.
func (w *Watcher) Run(ctx context.Context, fn func(*Objects, error)) error {
	settle := min(w.interval, maxSettle)

	var events <-chan fsnotify.Event
	watched := false
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		defer fw.Close()
		events = fw.Events
		go func() { // Errors (queue overflow) are covered by polling.
			for range fw.Errors {
			}
		}()
	}
	watch := func() {
		if fw != nil && !watched && fw.Add(w.dir) == nil {
			watched = true
		}
	}
	changed := func() bool {
		sum := fingerprint(w.dir)
		return !w.loaded || sum != w.lastSum
	}
	reload := func() {
		objs, sum, err := load(w.dir)
		if w.loaded && sum == w.lastSum {
			return
		}
		w.lastSum, w.loaded = sum, true
		if err == nil {
			w.last = objs
		}
		fn(w.last, err)
	}

	watch()
	if !w.loaded {
		reload()
	}
	timer := time.NewTimer(settle)
	if !changed() { // an edit between Load and Run is not lost
		timer.Stop()
	}
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		w.heartbeat.Beat()
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-w.heartbeat.Tick():
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			timer.Reset(settle)
		case <-ticker.C:
			watch()
			if changed() {
				timer.Reset(settle)
			}
		case <-timer.C:
			reload()
		}
	}
}

// fingerprint hashes dir's manifest files as load does, streaming each
// file through the hash rather than holding it: polling a directory of
// megabytes must not allocate megabytes.
func fingerprint(dir string) [32]byte {
	paths, err := listDir(dir)
	fp := newFingerprint(err)
	if err != nil {
		return fp.sum()
	}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return newFingerprint(readErr(err)).sum()
		}
		fh := sha256.New()
		_, err = io.Copy(fh, f)
		f.Close()
		if err != nil {
			return newFingerprint(readErr(err)).sum()
		}
		fp.addSum(path, fh)
	}
	return fp.sum()
}

// fileFingerprint accumulates the fingerprint of a directory's files: for
// each, its name and the SHA-256 of its contents; or of the error that
// stopped the read.
type fileFingerprint struct{ h hash.Hash }

func newFingerprint(err error) fileFingerprint {
	fp := fileFingerprint{sha256.New()}
	if err != nil {
		fp.h.Write([]byte("error\x00" + err.Error()))
	}
	return fp
}

// add adds a file read whole.
func (fp fileFingerprint) add(name string, data []byte) {
	fh := sha256.New()
	fh.Write(data)
	fp.addSum(name, fh)
}

// addSum adds a file whose contents fh has hashed.
func (fp fileFingerprint) addSum(name string, fh hash.Hash) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	fp.h.Write(n[:])
	fp.h.Write([]byte(name))
	fp.h.Write(fh.Sum(nil))
}

func (fp fileFingerprint) sum() [32]byte {
	var s [32]byte
	fp.h.Sum(s[:0])
	return s
}
