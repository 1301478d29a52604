package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// TestAgentFollowsOwnNodeIPAM runs an informer the way the agent will: on
// its own node's NodeIPAM only. The fake API server lists the object at
// generation 3, then a watch delivers the operator's release mark at
// generation 4; the informer's cache must end with the mark, and every
// request must have carried the name selector.
func TestAgentFollowsOwnNodeIPAM(t *testing.T) {
	listed := nodeIPAM("10")
	marked := nodeIPAM("11")
	marked.Generation = 4
	marked.Spec.Releases = []v1alpha1.ReleaseMark{{CIDR: "10.244.0.0/26", State: v1alpha1.MarkedForRelease}}

	var (
		mu      sync.Mutex
		queries []url.Values
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api+"nodeipams" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		queries = append(queries, r.URL.Query())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			_ = json.NewEncoder(w).Encode(&v1alpha1.NodeIPAMList{
				TypeMeta: metav1.TypeMeta{APIVersion: "lockstep.dev/v1alpha1", Kind: "NodeIPAMList"},
				ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items:    []v1alpha1.NodeIPAM{*listed},
			})
			return
		}
		if rv := r.URL.Query().Get("resourceVersion"); rv != "10" {
			t.Errorf("watch from resourceVersion %q, want the list's 10", rv)
		}
		raw, _ := json.Marshal(marked)
		_ = json.NewEncoder(w).Encode(metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw}})
		w.(http.Flusher).Flush()
		<-r.Context().Done() // hold the watch open, as an API server does
	}))
	defer srv.Close()

	c, err := client.NewForConfig(&client.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	nodeIPAMs := c.NodeIPAMs()
	inf := client.NewInformer(nodeIPAMs.ListWatchName("node-a"), nil)
	// Stop the informer before the server: Close waits for the open watch.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go inf.Run(ctx)
	if !client.WaitForSync(ctx, inf) {
		t.Fatal("informer never synced")
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		obj, ok := inf.Get("node-a")
		if ok && obj.(*v1alpha1.NodeIPAM).Spec.Mark("10.244.0.0/26") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("informer cache never saw the release mark; has %v", obj)
		}
		time.Sleep(10 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(queries) < 2 {
		t.Fatalf("saw %d requests, want a list and a watch", len(queries))
	}
	for _, q := range queries {
		if got := q.Get("fieldSelector"); got != "metadata.name=node-a" {
			t.Errorf("request %v has fieldSelector %q, want metadata.name=node-a", q, got)
		}
	}
}
