package manifests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/fsnotify/fsnotify"
)

// maxSettle bounds how long Watch waits for a burst of writes (an editor
// saving, a ConfigMap's symlinks swapping) to end before reading.
const maxSettle = 100 * time.Millisecond

// Watch loads dir, calls fn with the result, and then calls fn again each
// time the manifest files' contents change, until ctx is done; it returns
// ctx.Err().
//
// Changes are noticed through inotify (fsnotify) when the directory can be
// watched, and in any case by re-reading the files every interval, which
// also covers a directory that appears later or is replaced. After a
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
	if interval <= 0 {
		interval = time.Second
	}
	settle := min(interval, maxSettle)

	var events <-chan fsnotify.Event
	watched := false
	w, err := fsnotify.NewWatcher()
	if err == nil {
		defer w.Close()
		events = w.Events
		go func() { // Errors (queue overflow) are covered by polling.
			for range w.Errors {
			}
		}()
	}
	watch := func() {
		if w != nil && !watched && w.Add(dir) == nil {
			watched = true
		}
	}

	var last *Objects
	var lastSum [32]byte
	delivered := false
	load := func() {
		files, sum, err := readState(dir)
		if delivered && sum == lastSum {
			return
		}
		lastSum, delivered = sum, true
		if err == nil {
			var objs *Objects
			if objs, err = parseFiles(files); err == nil {
				last = objs
			}
		}
		fn(last, err)
	}
	watch()
	load()

	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	timer := time.NewTimer(settle)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			timer.Reset(settle)
		case <-ticker.C:
			watch()
			if _, sum, _ := readState(dir); sum != lastSum {
				timer.Reset(settle)
			}
		case <-timer.C:
			load()
		}
	}
}

// readState reads dir's manifest files and fingerprints them: a hash of
// every file's name and contents, or of the error that stopped the read.
func readState(dir string) ([]file, [32]byte, error) {
	files, err := readDir(dir)
	h := sha256.New()
	if err != nil {
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, f := range files {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f.name)))
		h.Write(n[:])
		h.Write([]byte(f.name))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write(n[:])
		h.Write(f.data)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return files, sum, err
}
