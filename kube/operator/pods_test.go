package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// pod is a running pod of namespace tenant on node with addresses ips.
func pod(name, node string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, UID: types.UID("pod-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func TestPodAddrsIn(t *testing.T) {
	hostNet := pod("host", "a", "10.0.0.5")
	hostNet.Spec.HostNetwork = true
	done := pod("done", "a", "10.0.0.6")
	done.Status.Phase = corev1.PodSucceeded
	legacy := pod("legacy", "b")
	legacy.Status.PodIP = "10.0.1.200" // only the singular field set
	s := newPodAddrs([]*corev1.Pod{
		pod("web", "a", "10.0.0.70", "fd00::46"), hostNet, done, legacy,
		pod("mapped", "c", "::ffff:10.0.2.9"),
	})
	tests := []struct {
		block string
		want  string // pod name; empty for none
	}{
		{"10.0.0.64/26", "tenant/web"},
		{"10.0.0.0/26", ""}, // the host-network and finished pods hold nothing
		{"10.0.0.128/26", ""},
		{"10.0.1.192/26", "tenant/legacy"},
		{"10.0.2.0/26", "tenant/mapped"},
		{"fd00::/120", "tenant/web"},
		{"fd00::100/120", ""},
		{"10.0.0.70/32", "tenant/web"},
		{"10.0.0.71/32", ""},
	}
	for _, tt := range tests {
		got, ok := s.in(netip.MustParsePrefix(tt.block))
		if ok != (tt.want != "") || got.pod != tt.want {
			t.Errorf("in(%s) = %q, %v; want %q", tt.block, got.pod, ok, tt.want)
		}
	}
	var none podAddrs
	if _, ok := none.in(netip.MustParsePrefix("0.0.0.0/0")); ok {
		t.Error("an empty index found an address")
	}
}

// TestPlanPodsOutrankAnswers: node b, compromised, writes node a's status:
// ready-for-release for a block a's pods still use. Whatever the status
// says, the operator releases no block a running pod, on any node, has an
// address in, and cuts no block around one.
func TestPlanPodsOutrankAnswers(t *testing.T) {
	v4 := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24")}
	const busy = "10.0.0.64/26"
	// The lie: usage 0, marked, ready-for-release, current.
	lied := func() ipam {
		return nodeIPAM("a").block("10.0.0.0/26", 10).block(busy, 0).mark(busy, v1alpha1.MarkedForRelease).answer(busy, v1alpha1.ReadyForRelease)
	}
	hostNet := pod("host", "a", "10.0.0.70")
	hostNet.Spec.HostNetwork = true
	failed := pod("failed", "a", "10.0.0.70")
	failed.Status.Phase = corev1.PodFailed
	tests := []struct {
		name  string
		pools []*v1alpha1.IPPool
		ipams []ipam
		pods  []*corev1.Pod
		want  want
	}{{
		name:  "no pod in the block: released, as the handshake says",
		pools: v4, ipams: []ipam{lied()},
		want: want{changes: []string{"a release " + busy}},
	}, {
		name:  "a pod of the node still has an address in it: not released",
		pools: v4, ipams: []ipam{lied()},
		pods: []*corev1.Pod{pod("web", "a", "10.0.0.70")},
		want: want{timers: map[string]string{"a " + busy: "3m0s"}, notes: []string{"pod tenant/web on node a still has address 10.0.0.70"}},
	}, {
		name:  "a pod of another node has an address in it: not released either",
		pools: v4, ipams: []ipam{lied()},
		pods: []*corev1.Pod{pod("web", "b", "10.0.0.127")},
		want: want{timers: map[string]string{"a " + busy: "3m0s"}, notes: []string{"pod tenant/web on node b"}},
	}, {
		name:  "a pod's IPv6 address does not hold an IPv4 block",
		pools: v4, ipams: []ipam{lied()},
		pods: []*corev1.Pod{pod("web", "a", "fd00::10.0.0.70")},
		want: want{changes: []string{"a release " + busy}},
	}, {
		name:  "host-network and finished pods hold no address",
		pools: v4, ipams: []ipam{lied()},
		pods: []*corev1.Pod{hostNet, failed},
		want: want{changes: []string{"a release " + busy}},
	}, {
		name:  "drained block with a pod in it: the mark stays, no release",
		pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/26")},
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 10).block(busy, 0).drain(busy).answer(busy, v1alpha1.ReadyForRelease)},
		pods:  []*corev1.Pod{pod("web", "a", "10.0.0.70")},
		want:  want{notes: []string{"drained: not released", "pod tenant/web"}},
	}, {
		name:  "drained block, no pod: released",
		pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/26")},
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 10).block(busy, 0).drain(busy).answer(busy, v1alpha1.ReadyForRelease)},
		want:  want{changes: []string{"a release " + busy}},
	}, {
		name:  "a block with a pod address in it is not cut for another node",
		pools: v4, ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 60), nodeIPAM("b")},
		pods: []*corev1.Pod{pod("stray", "c", "10.0.0.65")},
		want: want{assigns: []string{"a 10.0.0.128/26", "b 10.0.0.192/26"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &input{pools: tt.pools, nodes: nodes("a", "b"), now: t0, timers: timer("a", busy, delay), minFree: 16, delay: delay,
				pods: newPodAddrs(tt.pods)}
			for _, n := range tt.ipams {
				in.nodeIPAMs = append(in.nodeIPAMs, n.NodeIPAM)
			}
			p := planFor(in)
			got := describe(p)
			if !slices.Equal(got.changes, tt.want.changes) {
				t.Errorf("changes = %q, want %q", got.changes, tt.want.changes)
			}
			if !slices.Equal(got.assigns, tt.want.assigns) {
				t.Errorf("assigns = %q, want %q", got.assigns, tt.want.assigns)
			}
			if tt.want.timers != nil && fmt.Sprint(got.timers) != fmt.Sprint(tt.want.timers) {
				t.Errorf("timers = %v, want %v", got.timers, tt.want.timers)
			}
			for _, sub := range tt.want.notes {
				if !slices.ContainsFunc(p.notes, func(n string) bool { return strings.Contains(n, sub) }) {
					t.Errorf("no note contains %q; notes: %q", sub, p.notes)
				}
			}
		})
	}
}

// fakeAPI is an API server that serves fixed lists, holds watches open
// until the client leaves, and records every write and answers it with
// what was written.
type fakeAPI struct {
	lists map[string]any // path -> list object
	mu    sync.Mutex
	puts  map[string][]byte // path -> last body
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodGet && f.lists[r.URL.Path] != nil:
		_ = json.NewEncoder(w).Encode(f.lists[r.URL.Path])
	case r.Method == http.MethodPut:
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.puts[r.URL.Path] = body
		f.mu.Unlock()
		_, _ = w.Write(body)
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
		})
	}
}

func (f *fakeAPI) put(path string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.puts[path]
	return b, ok
}

// TestControllerReleaseChecksPods runs one pass of the controller against
// a fake API server: node a's NodeIPAM claims ready-for-release for a block
// (any node's agent could have written that status) while a pod still
// holds an address in it. The controller's pod informer sees the pod, and
// the pass writes no release; without the pod, the same pass releases.
func TestControllerReleaseChecksPods(t *testing.T) {
	const busy v1alpha1.CIDR = "10.0.0.64/26"
	const ipamPath = "/apis/lockstep.dev/v1alpha1/nodeipams/a"
	for _, tt := range []struct {
		name        string
		pods        []corev1.Pod
		wantRelease bool
	}{
		{name: "a pod holds an address in the block", pods: []corev1.Pod{*pod("web", "a", "10.0.0.70")}, wantRelease: false},
		{name: "no pod in the block", pods: []corev1.Pod{*pod("web", "a", "10.0.0.7")}, wantRelease: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := nodeIPAM("a").block("10.0.0.0/26", 10).block(busy, 0).mark(busy, v1alpha1.MarkedForRelease).answer(busy, v1alpha1.ReadyForRelease)
			n.ResourceVersion = "7"
			p := pool("v4", 26, "10.0.0.0/24")
			p.ResourceVersion = "3"
			api := &fakeAPI{puts: map[string][]byte{}, lists: map[string]any{
				"/api/v1/nodes": &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"},
					Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a", ResourceVersion: "1"}}}},
				"/api/v1/pods": &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"},
					Items: tt.pods},
				"/apis/lockstep.dev/v1alpha1/ippools": &v1alpha1.IPPoolList{TypeMeta: metav1.TypeMeta{Kind: "IPPoolList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
					ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []v1alpha1.IPPool{*p}},
				"/apis/lockstep.dev/v1alpha1/nodeipams": &v1alpha1.NodeIPAMList{TypeMeta: metav1.TypeMeta{Kind: "NodeIPAMList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
					ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []v1alpha1.NodeIPAM{*n.NodeIPAM}},
			}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			cs, err := newClients(&client.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(testWriter{t, "operator"}, nil))
			c := newController(cs, &Config{Logger: log, MinFree: 16, ExcessReleaseDelay: 0, Resync: time.Minute}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, inf := range []*client.Informer{c.nodes, c.pools, c.ipams, c.pods} {
				wg.Add(1)
				go func() { defer wg.Done(); inf.Run(ctx) }()
			}
			defer wg.Wait()
			defer cancel()
			if !client.WaitForSync(ctx, c.nodes, c.pools, c.ipams, c.pods) {
				t.Fatal("informers did not sync")
			}
			if _, err := c.pass(ctx); err != nil {
				t.Fatalf("pass: %v", err)
			}
			body, wrote := api.put(ipamPath)
			released := false
			if wrote {
				var out v1alpha1.NodeIPAM
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatal(err)
				}
				released = out.Spec.Block(busy) == nil
			}
			if released != tt.wantRelease {
				t.Errorf("block %s released = %v, want %v (wrote nodeipam: %v)", busy, released, tt.wantRelease, wrote)
			}
		})
	}
}
