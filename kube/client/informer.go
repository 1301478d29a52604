package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"lockstep.dev/lockstep/internal/backoff"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
)

// ListWatch lists and watches one kind of object for an Informer.
type ListWatch struct {
	// Resource names the objects in log messages and errors ("nodes").
	Resource string
	// List returns a list object (such as *corev1.PodList) and its
	// resourceVersion.
	List func(context.Context, metav1.ListOptions) (runtime.Object, error)
	// Watch streams the changes after opts.ResourceVersion.
	Watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// Handler is told of every change an Informer applies to its cache, after
// the cache holds it. Any of the functions may be nil. They run on the
// informer's goroutine and must not block: a slow handler delays the
// informer's next event.
type Handler struct {
	Add    func(obj Object)
	Update func(old, obj Object)
	// Delete gets the object's last state: the API server's for a watched
	// deletion, the cached one when a relist found the object gone.
	Delete func(obj Object)
}

// Reflector timings, the same as client-go's reflector uses.
const (
	// minWatchTimeout is the shortest a watch asks the API server to stay
	// open; each asks for a random time up to twice it, so a fleet of
	// agents does not reconnect at once.
	minWatchTimeout = 5 * time.Minute
	// backoffFirst and backoffMax bound the wait before a relist (and a
	// retried watch), doubling on each failure; a success that lasts
	// backoffReset starts again from backoffFirst.
	backoffFirst = 800 * time.Millisecond
	backoffMax   = 30 * time.Second
	backoffReset = 2 * time.Minute
	// shortWatch is a watch that ends this soon without an event: a
	// failure, answered with a relist rather than a busy loop.
	shortWatch = time.Second
	// listPageSize is how many objects a page of a consistent list
	// (resourceVersion "") holds: that list is read from etcd, and a
	// relist of every pod of a cluster in one response would cost the
	// API server and etcd as much memory at once.
	listPageSize = 500
	// syncPoll is how often WaitForSync looks.
	syncPoll = 100 * time.Millisecond
)

// Informer keeps a cache of the objects a ListWatch returns: it lists them
// once, then follows a watch from the list's resourceVersion, and lists
// again (telling handlers what changed meanwhile) whenever the watch
// cannot resume. It is lockstep's own, smaller than client-go's
// tools/cache informer, whose reflector links go-cmp and a consistency
// detector that every lockstep-cni start would pay to initialise
// (cmd/lockstep/deps_test.go); it keeps the reflector's protocol: the first
// list at resourceVersion 0 (from the API server's watch cache), watches
// with bookmarks from the last version seen, a relist from that version
// when a watch expires and a consistent one when the version is too old,
// and the same backoff.
type Informer struct {
	lw        ListWatch
	log       *slog.Logger
	transform func(Object) Object
	handlers  []Handler
	running   atomic.Bool
	synced    atomic.Bool

	mu    sync.RWMutex
	items map[string]Object

	// Owned by Run's goroutine.
	lastRV   string
	rvTooOld bool
	retry    backoff.Backoff
}

// NewInformer returns an Informer on lw that logs the API server's
// failures to log (slog.Default when nil). Add handlers and a transform,
// then Run it.
func NewInformer(lw ListWatch, log *slog.Logger) *Informer {
	if log == nil {
		log = slog.Default()
	}
	return &Informer{lw: lw, log: log, items: map[string]Object{},
		retry: backoff.Backoff{First: backoffFirst, Max: backoffMax, ResetAfter: backoffReset, Jitter: true}}
}

// SetTransform makes the Informer cache fn(obj) instead of each object the
// API server sends, for example to drop what no reader needs. Call it
// before Run.
func (i *Informer) SetTransform(fn func(Object) Object) { i.transform = fn }

// AddHandler adds a handler. Call it before Run.
func (i *Informer) AddHandler(h Handler) { i.handlers = append(i.handlers, h) }

// HasSynced reports whether the first list is in the cache and its
// handlers have run.
func (i *Informer) HasSynced() bool { return i.synced.Load() }

// Get returns the cached object with key (see Key).
func (i *Informer) Get(key string) (Object, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	obj, ok := i.items[key]
	return obj, ok
}

// List returns every cached object, in no particular order. The objects
// are shared with the cache: do not modify them.
func (i *Informer) List() []Object {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]Object, 0, len(i.items))
	for _, obj := range i.items {
		out = append(out, obj)
	}
	return out
}

// Len returns how many objects the cache holds.
func (i *Informer) Len() int {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return len(i.items)
}

// Key is the cache key of obj: namespace/name, or name for a
// cluster-scoped object.
func Key(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// SplitKey returns the namespace (empty for a cluster-scoped object) and
// name of a Key.
func SplitKey(key string) (namespace, name string, err error) {
	parts := strings.Split(key, "/")
	switch len(parts) {
	case 1:
		return "", parts[0], nil
	case 2:
		return parts[0], parts[1], nil
	}
	return "", "", fmt.Errorf("split cache key %q: want namespace/name or name", key)
}

// WaitForSync waits until every informer has synced, and reports false if
// ctx ended first.
func WaitForSync(ctx context.Context, informers ...*Informer) bool {
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for {
		synced := true
		for _, inf := range informers {
			synced = synced && inf.HasSynced()
		}
		if synced {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// Run lists and watches until ctx ends. It may be called once; a second
// call logs an error and returns.
func (i *Informer) Run(ctx context.Context) {
	if !i.running.CompareAndSwap(false, true) {
		i.log.Error("informer already running; build a new one for a new run", "resource", i.lw.Resource)
		return
	}
	for {
		if err := i.listAndWatch(ctx); err != nil && ctx.Err() == nil {
			i.log.Warn("list and watch from the API server; retrying", "resource", i.lw.Resource, "err", err)
		}
		if !i.sleep(ctx) {
			return
		}
	}
}

// sleep waits the next backoff step and reports false if ctx ended first.
func (i *Informer) sleep(ctx context.Context) bool {
	return backoff.Sleep(ctx, i.retry.Next(time.Now()))
}

// relistVersion is the resourceVersion the next list asks for: 0 at first
// (any version, from the watch cache), then at least the last one seen,
// or the current one ("") when the last seen is too old to serve.
func (i *Informer) relistVersion() string {
	switch {
	case i.rvTooOld:
		return ""
	case i.lastRV == "":
		return "0"
	}
	return i.lastRV
}

// listAndWatch lists into the cache, then applies watch events until a
// watch ends in a way that needs a relist, or ctx ends (nil).
func (i *Informer) listAndWatch(ctx context.Context) error {
	if err := i.list(ctx); err != nil {
		return err
	}
	for ctx.Err() == nil {
		timeout := int64(minWatchTimeout.Seconds() * (rand.Float64() + 1))
		w, err := i.lw.Watch(ctx, metav1.ListOptions{
			ResourceVersion:     i.lastRV,
			TimeoutSeconds:      &timeout,
			AllowWatchBookmarks: true,
		})
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || apierrors.IsTooManyRequests(err) {
				// The API server is away or busy: resume the watch where
				// it ended once it is back, without a relist.
				if !i.sleep(ctx) {
					return nil
				}
				continue
			}
			return err
		}
		err = i.watch(ctx, w)
		w.Stop()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			continue // the watch timed out: resume it
		case isExpired(err):
			// Relist from the last version seen; list finds out whether
			// the API server still has it.
			return nil
		case apierrors.IsTooManyRequests(err):
			if !i.sleep(ctx) {
				return nil
			}
			continue
		}
		return err
	}
	return nil
}

// list replaces the cache with a list of every object, telling handlers
// of each addition, update and deletion against what it held.
func (i *Informer) list(ctx context.Context) error {
	raw, rv, err := i.listPages(ctx, i.relistVersion())
	if err != nil && (isExpired(err) || isTooLargeVersion(err)) {
		i.rvTooOld = true
		raw, rv, err = i.listPages(ctx, i.relistVersion())
	}
	if err != nil {
		return err
	}
	i.rvTooOld = false
	items := make(map[string]Object, len(raw))
	for _, r := range raw {
		obj, ok := r.(Object)
		if !ok {
			return fmt.Errorf("list %s: item of type %T has no object metadata", i.lw.Resource, r)
		}
		obj = i.transformed(obj)
		items[Key(obj)] = obj
	}

	i.mu.Lock()
	old := i.items
	i.items = items
	i.mu.Unlock()
	for key, obj := range items {
		if prev, ok := old[key]; ok {
			i.notify(func(h Handler) {
				if h.Update != nil {
					h.Update(prev, obj)
				}
			})
		} else {
			i.notify(func(h Handler) {
				if h.Add != nil {
					h.Add(obj)
				}
			})
		}
	}
	for key, prev := range old {
		if _, ok := items[key]; !ok {
			i.notify(func(h Handler) {
				if h.Delete != nil {
					h.Delete(prev)
				}
			})
		}
	}
	i.lastRV = rv
	i.synced.Store(true)
	return nil
}

// listPages lists every object at resourceVersion rv and returns them
// with the list's version. A consistent list (rv "") is read in pages of
// listPageSize, as client-go's reflector reads it; should the API server
// no longer serve the snapshot the pages come from (410 on a continue),
// it lists everything again in one response, as the reflector does.
func (i *Informer) listPages(ctx context.Context, rv string) ([]runtime.Object, string, error) {
	opts := metav1.ListOptions{ResourceVersion: rv}
	if rv == "" {
		opts.Limit = listPageSize
	}
	var items []runtime.Object
	for {
		list, err := i.lw.List(ctx, opts)
		if err != nil && opts.Continue != "" && isExpired(err) {
			opts, items = metav1.ListOptions{ResourceVersion: rv}, nil
			continue
		}
		if err != nil {
			return nil, "", err
		}
		lm, ok := list.(runtime.ListMeta)
		if !ok {
			return nil, "", fmt.Errorf("list %s: %T is not a list", i.lw.Resource, list)
		}
		raw, err := runtime.ExtractList(list)
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", i.lw.Resource, err)
		}
		items = append(items, raw...)
		next := lm.GetContinue()
		if next == "" || opts.Limit == 0 {
			return items, lm.GetResourceVersion(), nil
		}
		// The next page comes from the same snapshot: the token names
		// it, and a continued list takes no resourceVersion.
		opts.Continue, opts.ResourceVersion = next, ""
	}
}

// watch applies w's events to the cache until w ends (nil, unless it ends
// at once without an event) or sends an error.
func (i *Informer) watch(ctx context.Context, w watch.Interface) error {
	start, events := time.Now(), 0
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			break
		}
		if ev.Type == watch.Error {
			return apierrors.FromObject(ev.Object)
		}
		obj, isObj := ev.Object.(Object)
		if !isObj {
			i.log.Warn("watch event without object metadata; ignored", "resource", i.lw.Resource, "type", fmt.Sprintf("%T", ev.Object))
			continue
		}
		events++
		// The version comes from the object as the server sent it: a
		// transform may drop metadata, and a lost version would restart
		// the next watch from now, missing what happened in between.
		rv := obj.GetResourceVersion()
		switch ev.Type {
		case watch.Added, watch.Modified:
			obj = i.transformed(obj)
			key := Key(obj)
			i.mu.Lock()
			prev, existed := i.items[key]
			i.items[key] = obj
			i.mu.Unlock()
			i.notify(func(h Handler) {
				switch {
				case existed && h.Update != nil:
					h.Update(prev, obj)
				case !existed && h.Add != nil:
					h.Add(obj)
				}
			})
		case watch.Deleted:
			obj = i.transformed(obj)
			key := Key(obj)
			i.mu.Lock()
			_, existed := i.items[key]
			delete(i.items, key)
			i.mu.Unlock()
			if existed { // as client-go: no Delete for what the cache never held
				i.notify(func(h Handler) {
					if h.Delete != nil {
						h.Delete(obj)
					}
				})
			}
		case watch.Bookmark:
		default:
			i.log.Warn("unknown watch event; ignored", "resource", i.lw.Resource, "type", ev.Type)
			continue
		}
		if rv != "" {
			i.lastRV = rv
		}
	}
	if events == 0 && time.Since(start) < shortWatch {
		return fmt.Errorf("watch %s: closed within %s without an event", i.lw.Resource, shortWatch)
	}
	return nil
}

func (i *Informer) transformed(obj Object) Object {
	if i.transform == nil {
		return obj
	}
	return i.transform(obj)
}

func (i *Informer) notify(call func(Handler)) {
	for _, h := range i.handlers {
		call(h)
	}
}

// isExpired reports whether err says the resourceVersion asked for is no
// longer served (410 Gone; Expired is what current API servers say).
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// isTooLargeVersion reports whether err says the resourceVersion asked for
// is newer than the API server has seen (a list from another server).
func isTooLargeVersion(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}
