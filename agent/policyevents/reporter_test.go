package policyevents

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/client"
)

// apiServer records the Events posted to it.
type apiServer struct {
	mu     sync.Mutex
	events []corev1.Event
	paths  []string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev corev1.Event
	if r.Method != http.MethodPost || json.Unmarshal(body, &ev) != nil {
		http.Error(w, "want a POSTed Event", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.paths = append(s.paths, r.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// TestReporterPostsAChangeOnce: a policy that starts failing gets one
// Warning event, naming it with its UID and the reason; the same failure
// applied again posts nothing; a new reason posts again; the policy
// enforced again gets one Normal event. Another policy is never touched.
// A policy deleted while it failed gets no Normal event: it is gone.
func TestReporterPostsAChangeOnce(t *testing.T) {
	srv := &apiServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	core, err := client.ForGroup(&client.Config{Host: ts.URL}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	r := New(core, "node-a", func(ns, name string) types.UID {
		if deleted[ns+"/"+name] {
			return ""
		}
		return types.UID("uid-" + ns + "-" + name)
	}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	steps := []struct {
		failed  map[string]string
		deleted string   // a policy the agent no longer holds
		want    []string // reason and involved object of each new event
	}{
		{map[string]string{"team/bad": "cidr: bad"}, "", []string{"Warning FailsClosed team/bad uid-team-bad cidr: bad"}},
		{map[string]string{"team/bad": "cidr: bad"}, "", nil},
		{map[string]string{"team/bad": "port 0"}, "", []string{"Warning FailsClosed team/bad uid-team-bad port 0"}},
		{map[string]string{}, "", []string{"Normal Enforced team/bad uid-team-bad enforces this policy as written again"}},
		{map[string]string{}, "", nil},
		{map[string]string{"team/gone": "port 0"}, "", []string{"Warning FailsClosed team/gone uid-team-gone port 0"}},
		{map[string]string{}, "team/gone", nil},
		{map[string]string{}, "", nil},
	}
	seen := 0
	for i, s := range steps {
		if s.deleted != "" {
			deleted[s.deleted] = true
		}
		r.post(ctx, s.failed)
		srv.mu.Lock()
		got := srv.events[seen:]
		paths := srv.paths[seen:]
		seen = len(srv.events)
		srv.mu.Unlock()
		if len(got) != len(s.want) {
			t.Fatalf("step %d: %d events %+v, want %d", i, len(got), got, len(s.want))
		}
		for j, ev := range got {
			line := strings.Join([]string{ev.Type, ev.Reason, ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), ev.Message}, " ")
			want := strings.Fields(s.want[j])
			prefix, note := strings.Join(want[:4], " "), strings.Join(want[4:], " ")
			if !strings.HasPrefix(line, prefix) || !strings.Contains(ev.Message, note) || ev.InvolvedObject.Kind != "NetworkPolicy" ||
				!strings.Contains(ev.Message, "node-a") || paths[j] != "/api/v1/namespaces/team/events" {
				t.Errorf("step %d: event %q at %s, want %q", i, line, paths[j], s.want[j])
			}
		}
	}
}

// TestUpdateNeverBlocks: sets handed over faster than Run takes them
// replace each other; the last one is what Run sees.
func TestUpdateNeverBlocks(t *testing.T) {
	r := New(nil, "node-a", nil, slog.New(slog.DiscardHandler))
	for i := range 100 {
		r.Update(map[string]string{"team/p": strings.Repeat("x", i)})
	}
	if got := <-r.next; got["team/p"] != strings.Repeat("x", 99) {
		t.Errorf("Run would see %q, want the last set", got["team/p"])
	}
}
