package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/client"
)

// eventSink is an API server that records the Events posted to it.
type eventSink struct {
	mu     sync.Mutex
	events []corev1.Event
}

func (s *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev corev1.Event
	if r.Method != http.MethodPost || json.Unmarshal(body, &ev) != nil {
		http.Error(w, "want a POSTed Event", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// waitFor returns the first n events posted, failing t if they do not
// come within a few seconds.
func (s *eventSink) waitFor(t *testing.T, n int) []corev1.Event {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		evs := append([]corev1.Event(nil), s.events...)
		s.mu.Unlock()
		if len(evs) >= n {
			return evs[:n]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Fatalf("%d events posted, want %d: %+v", len(s.events), n, s.events)
	return nil
}

// TestNodeReportsOnlyPoliciesSelectingItsPods: every node compiles every
// policy of the cluster, and each used to post a FailsClosed Event for
// every failed one, K bad policies times N nodes. A node now posts one
// for a failed policy that selects a pod of its own, none for one that
// selects no pod of it (which status and metrics still show), an Enforced
// one when a policy it reported is fixed, and none when such a policy is
// deleted.
func TestNodeReportsOnlyPoliciesSelectingItsPods(t *testing.T) {
	sink := &eventSink{}
	ts := httptest.NewServer(sink)
	defer ts.Close()
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	write := func(fn func(*store.Txn) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	portZero := policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(0)}}}}}
	bad := func(ns, name string, sel map[string]string) *policyapi.NetworkPolicy {
		return &policyapi.NetworkPolicy{
			ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, UID: "uid-" + name},
			Spec:       policyapi.NetworkPolicySpec{PodSelector: policyapi.LabelSelector{MatchLabels: sel}, Ingress: portZero.Ingress},
		}
	}
	write(func(txn *store.Txn) error {
		if err := store.AttachEndpoint(txn, &store.Endpoint{
			Attachment: store.Attachment{ContainerID: "c-a", IfName: "eth0"}, HostIfName: "lsa", State: store.EndpointReady,
			Pod:       store.PodRef{Namespace: "team", Name: "a"},
			Addresses: []store.AddressRef{{Pool: "v4", Addr: netip.MustParseAddr("10.244.0.2"), Bits: 24}},
		}); err != nil {
			return err
		}
		if err := store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "a", Labels: map[string]string{"app": "a"}}}); err != nil {
			return err
		}
		for _, np := range []*policyapi.NetworkPolicy{
			bad("far", "elsewhere", nil), // selects every pod of far: none here
			bad("team", "deleted", map[string]string{"app": "a"}),
			bad("team", "fixed", map[string]string{"app": "a"}),
		} {
			if err := store.UpsertPolicy(txn, np); err != nil {
				return err
			}
		}
		return nil
	})
	log := slog.New(slog.DiscardHandler)
	enf := enforcer.New(st, nopDataplane{}, log)
	k := &kubeMode{config: &client.Config{Host: ts.URL}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.reportPolicyFailures(ctx, "node-a", st, enf, log); err != nil {
		t.Fatal(err)
	}
	if err := enf.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if f := enf.Failures().Policies; len(f) != 3 {
		t.Errorf("failed policies %v: status and metrics must still show all three", f)
	}
	// The reporter posts in the order of the policies' names: far/elsewhere
	// would come first.
	describe := func(ev corev1.Event) string {
		return ev.Type + " " + ev.Reason + " " + ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name + " " + string(ev.InvolvedObject.UID)
	}
	for i, want := range []string{"Warning FailsClosed team/deleted uid-deleted", "Warning FailsClosed team/fixed uid-fixed"} {
		if got := describe(sink.waitFor(t, 2)[i]); got != want {
			t.Errorf("event %d: %q, want %q", i, got, want)
		}
	}

	write(func(txn *store.Txn) error {
		if err := store.DeletePolicy(txn, "team", "deleted"); err != nil {
			return err
		}
		fixed := bad("team", "fixed", map[string]string{"app": "a"})
		fixed.Spec.Ingress = nil
		return store.UpsertPolicy(txn, fixed)
	})
	if err := enf.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// team/deleted sorts first: an Event on it would come before this one.
	if got, want := describe(sink.waitFor(t, 3)[2]), "Normal Enforced team/fixed uid-fixed"; got != want {
		t.Errorf("after fixing team/fixed and deleting team/deleted: event %q, want %q", got, want)
	}
}
