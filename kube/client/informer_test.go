package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// scriptedAPI is a ListWatch whose lists answer from a script and whose
// watches the test drives, recording what each request asked for.
type scriptedAPI struct {
	t       *testing.T
	mu      sync.Mutex
	lists   []func() (runtime.Object, error)
	asked   []string // "list rv=..." and "watch rv=..."
	watches chan *watch.FakeWatcher
}

func (a *scriptedAPI) listWatch() client.ListWatch {
	return client.ListWatch{
		Resource: "nodeipams",
		List: func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			asked := "list rv=" + opts.ResourceVersion
			if opts.Limit != 0 {
				asked += fmt.Sprintf(" limit=%d", opts.Limit)
			}
			if opts.Continue != "" {
				asked += " continue=" + opts.Continue
			}
			a.asked = append(a.asked, asked)
			if len(a.lists) == 0 {
				a.t.Errorf("unexpected list at rv %q", opts.ResourceVersion)
				return nil, apierrors.NewServiceUnavailable("no more lists")
			}
			next := a.lists[0]
			a.lists = a.lists[1:]
			return next()
		},
		Watch: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			a.mu.Lock()
			a.asked = append(a.asked, fmt.Sprintf("watch rv=%s bookmarks=%t", opts.ResourceVersion, opts.AllowWatchBookmarks))
			a.mu.Unlock()
			w := watch.NewFake()
			a.watches <- w
			return w, nil
		},
	}
}

func (a *scriptedAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked)
}

func listOf(rv string, items ...*v1alpha1.NodeIPAM) func() (runtime.Object, error) {
	return func() (runtime.Object, error) {
		l := &v1alpha1.NodeIPAMList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, it := range items {
			l.Items = append(l.Items, *it)
		}
		return l, nil
	}
}

func ipam(name, rv string) *v1alpha1.NodeIPAM {
	return &v1alpha1.NodeIPAM{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
}

// eventLog records what an Informer's handler was told.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) handler() client.Handler {
	add := func(s string) {
		l.mu.Lock()
		l.events = append(l.events, s)
		l.mu.Unlock()
	}
	return client.Handler{
		Add: func(o client.Object) { add("add " + o.GetName() + "@" + o.GetResourceVersion()) },
		Update: func(old, o client.Object) {
			add("update " + o.GetName() + "@" + old.GetResourceVersion() + "->" + o.GetResourceVersion())
		},
		Delete: func(o client.Object) { add("delete " + o.GetName() + "@" + o.GetResourceVersion()) },
	}
}

// take returns the events so far, sorted (a list notifies in map order),
// and forgets them.
func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	slices.Sort(out)
	return out
}

// runInformer runs inf until the returned stop is called (or the test
// ends); stop waits for Run to return.
func runInformer(t *testing.T, inf *client.Informer) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// TestInformerWatchExpiresThenRelistsConsistently follows an informer
// through a list, a watch that changes, bookmarks and deletes, the watch
// expiring, a relist from the last version seen that is too old as well,
// and the consistent relist after it: the cache and the handlers must end
// where the API server is, deletions missed meanwhile included.
func TestInformerWatchExpiresThenRelistsConsistently(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version")
	api := &scriptedAPI{t: t, watches: make(chan *watch.FakeWatcher, 1), lists: []func() (runtime.Object, error){
		listOf("5", ipam("a", "1"), ipam("b", "2")),
		func() (runtime.Object, error) { return nil, fmt.Errorf("list nodeipams: %w", gone) },
		listOf("12", ipam("a", "10"), ipam("d", "11")),
	}}
	inf := client.NewInformer(api.listWatch(), nil)
	inf.SetTransform(func(o client.Object) client.Object {
		n := o.(*v1alpha1.NodeIPAM).DeepCopy()
		n.Labels = map[string]string{"trimmed": "yes"}
		return n
	})
	var log eventLog
	inf.AddHandler(log.handler())
	stop := runInformer(t, inf)

	w := <-api.watches
	if !inf.HasSynced() {
		t.Fatal("watching before the first list is in the cache")
	}
	if got, want := log.take(), []string{"add a@1", "add b@2"}; !slices.Equal(got, want) {
		t.Errorf("after the list, handlers saw %v, want %v", got, want)
	}
	w.Modify(ipam("a", "6"))
	w.Add(ipam("c", "7"))
	w.Action(watch.Bookmark, ipam("", "8"))
	w.Delete(ipam("b", "9"))
	w.Error(&gone.ErrStatus)
	w = <-api.watches
	// The watch: a changes, c comes, b goes. The relist: a changed
	// again, d came and c went while no watch was open.
	if got, want := log.take(), []string{"add c@7", "add d@11", "delete b@9", "delete c@7", "update a@1->6", "update a@6->10"}; !slices.Equal(got, want) {
		t.Errorf("handlers saw %v, want %v", got, want)
	}
	keys := func() []string {
		var out []string
		for _, o := range inf.List() {
			if o.GetLabels()["trimmed"] != "yes" {
				t.Errorf("%s cached without the transform", o.GetName())
			}
			out = append(out, o.GetName()+"@"+o.GetResourceVersion())
		}
		slices.Sort(out)
		return out
	}
	if got, want := keys(), []string{"a@10", "d@11"}; !slices.Equal(got, want) {
		t.Errorf("cache holds %v, want %v", got, want)
	}
	if o, ok := inf.Get("d"); !ok || o.GetResourceVersion() != "11" {
		t.Errorf("Get(d) = %v, %t", o, ok)
	}
	wantAsked := []string{
		"list rv=0",                  // the first list may come from the watch cache
		"watch rv=5 bookmarks=true",  // from the list's version
		"list rv=9",                  // after the expired watch: from the last version seen
		"list rv= limit=500",         // that one too old: a consistent list, in pages
		"watch rv=12 bookmarks=true", // from the relist's version
	}
	if got := api.requests(); !slices.Equal(got, wantAsked) {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantAsked, "\n"))
	}

	// A watch the API server times out resumes from where it ended,
	// without a relist.
	w.Modify(ipam("d", "13"))
	w.Stop()
	<-api.watches
	if got := api.requests(); got[len(got)-1] != "watch rv=13 bookmarks=true" {
		t.Errorf("after a closed watch, requests end %v, want a watch from rv 13", got[len(got)-2:])
	}
	stop()
}

// TestInformerKeys checks the cache keys the agent's source splits.
func TestInformerKeys(t *testing.T) {
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web-0"}}
	pod.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	if k := client.Key(pod); k != "prod/web-0" {
		t.Errorf("Key = %q", k)
	}
	if k := client.Key(ipam("node-a", "")); k != "node-a" {
		t.Errorf("Key = %q", k)
	}
	for key, want := range map[string][2]string{"prod/web-0": {"prod", "web-0"}, "node-a": {"", "node-a"}} {
		ns, name, err := client.SplitKey(key)
		if err != nil || ns != want[0] || name != want[1] {
			t.Errorf("SplitKey(%q) = %q, %q, %v", key, ns, name, err)
		}
	}
	if _, _, err := client.SplitKey("a/b/c"); err == nil {
		t.Error("SplitKey took a key with two slashes")
	}
}

// TestWaitForSyncStopsWithContext checks WaitForSync gives up when its
// context ends.
func TestWaitForSyncStopsWithContext(t *testing.T) {
	inf := client.NewInformer(client.ListWatch{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	if client.WaitForSync(ctx, inf) {
		t.Error("an informer that never ran synced")
	}
}

// TestInformerKeepsServerVersionsPastTransforms: a transform that drops
// the resource version must not make the next watch start from now, and
// a deletion of something the cache never held tells no handler.
func TestInformerKeepsServerVersionsPastTransforms(t *testing.T) {
	api := &scriptedAPI{t: t, watches: make(chan *watch.FakeWatcher, 1), lists: []func() (runtime.Object, error){
		listOf("5", ipam("a", "1")),
	}}
	inf := client.NewInformer(api.listWatch(), nil)
	inf.SetTransform(func(o client.Object) client.Object {
		n := o.(*v1alpha1.NodeIPAM).DeepCopy()
		n.ResourceVersion = ""
		return n
	})
	var log eventLog
	inf.AddHandler(log.handler())
	stop := runInformer(t, inf)

	w := <-api.watches
	w.Modify(ipam("a", "6"))
	w.Delete(ipam("never-listed", "7"))
	w.Stop()
	<-api.watches
	if got := api.requests(); got[len(got)-1] != "watch rv=7 bookmarks=true" {
		t.Errorf("requests %v: want the next watch from rv 7, the last version the server sent", got)
	}
	if got, want := log.take(), []string{"add a@", "update a@->"}; !slices.Equal(got, want) {
		t.Errorf("handlers saw %v, want %v (no delete of an object never cached)", got, want)
	}
	stop()
}

func pageOf(rv, next string, items ...*v1alpha1.NodeIPAM) func() (runtime.Object, error) {
	return func() (runtime.Object, error) {
		l := &v1alpha1.NodeIPAMList{ListMeta: metav1.ListMeta{ResourceVersion: rv, Continue: next}}
		for _, it := range items {
			l.Items = append(l.Items, *it)
		}
		return l, nil
	}
}

// TestInformerConsistentRelistIsPaged: a relist the watch cache cannot
// serve reads etcd in pages of 500, each continuing the last, and the
// cache holds every page; when the snapshot behind the pages expires
// midway, one unpaged list replaces them.
func TestInformerConsistentRelistIsPaged(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version")
	expired := func() (runtime.Object, error) { return nil, fmt.Errorf("list nodeipams: %w", gone) }
	for _, tc := range []struct {
		name      string
		pages     []func() (runtime.Object, error)
		wantAsked []string
		wantCache []string
	}{{
		name:  "pages",
		pages: []func() (runtime.Object, error){pageOf("12", "p2", ipam("a", "10")), pageOf("12", "p3", ipam("d", "11")), pageOf("12", "", ipam("e", "12"))},
		wantAsked: []string{
			"list rv= limit=500",
			"list rv= limit=500 continue=p2",
			"list rv= limit=500 continue=p3",
			"watch rv=12 bookmarks=true",
		},
		wantCache: []string{"a@10", "d@11", "e@12"},
	}, {
		name:  "snapshot expires",
		pages: []func() (runtime.Object, error){pageOf("12", "p2", ipam("a", "10")), expired, listOf("14", ipam("a", "13"), ipam("e", "14"))},
		wantAsked: []string{
			"list rv= limit=500",
			"list rv= limit=500 continue=p2",
			"list rv=", // one list of everything
			"watch rv=14 bookmarks=true",
		},
		wantCache: []string{"a@13", "e@14"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// The first list is too old: the informer lists consistently.
			api := &scriptedAPI{t: t, watches: make(chan *watch.FakeWatcher, 1), lists: append([]func() (runtime.Object, error){expired}, tc.pages...)}
			inf := client.NewInformer(api.listWatch(), nil)
			stop := runInformer(t, inf)
			<-api.watches
			var cache []string
			for _, o := range inf.List() {
				cache = append(cache, o.GetName()+"@"+o.GetResourceVersion())
			}
			slices.Sort(cache)
			stop()
			if !slices.Equal(cache, tc.wantCache) {
				t.Errorf("cache holds %v, want %v", cache, tc.wantCache)
			}
			want := append([]string{"list rv=0"}, tc.wantAsked...)
			if got := api.requests(); !slices.Equal(got, want) {
				t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
