package client_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/client"
)

// seen is the headers of the requests a test server received.
type seen struct {
	mu      sync.Mutex
	headers []http.Header
}

func (s *seen) add(h http.Header) {
	s.mu.Lock()
	s.headers = append(s.headers, h.Clone())
	s.mu.Unlock()
}

func (s *seen) last(t *testing.T) http.Header {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.headers) == 0 {
		t.Fatal("the server saw no request")
	}
	return s.headers[len(s.headers)-1]
}

// tlsServer answers every request with an empty Namespace, or 401 while
// refuse says so, and returns a Config trusting it.
func tlsServer(t *testing.T, refuse func(http.Header) bool) (*client.Config, *seen) {
	t.Helper()
	s := &seen{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r.Header)
		w.Header().Set("Content-Type", "application/json")
		if refuse != nil && refuse(r.Header) {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized})
			return
		}
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &client.Config{Host: srv.URL, CAData: ca}, s
}

func getNamespace(t *testing.T, cfg *client.Config) error {
	t.Helper()
	c, err := client.ForGroup(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	return c.Get().Resource("namespaces").Name("x").Do(t.Context()).Into(&corev1.Namespace{})
}

// TestCredentialsAndHeaders: each kind of credential a kubeconfig or a
// pod's service account gives reaches a TLS server as client-go sends it.
func TestCredentialsAndHeaders(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		set   func(*client.Config)
		check func(http.Header) string // what is wrong, or ""
	}{
		{"bearer token", func(c *client.Config) { c.BearerToken = "abc" }, want("Authorization", "Bearer abc")},
		{"token file wins over the token", func(c *client.Config) { c.BearerToken, c.BearerTokenFile = "stale", tokenFile }, want("Authorization", "Bearer from-file")},
		{"basic auth", func(c *client.Config) { c.Username, c.Password = "admin", "secret" }, want("Authorization", "Basic YWRtaW46c2VjcmV0")},
		{"no credentials", func(*client.Config) {}, want("Authorization", "")},
		{"default user agent", func(*client.Config) {}, func(h http.Header) string {
			if ua := h.Get("User-Agent"); !strings.HasPrefix(ua, "lockstep/") {
				return fmt.Sprintf("User-Agent %q, want lockstep/...", ua)
			}
			return ""
		}},
		{"impersonation", func(c *client.Config) {
			c.BearerToken = "abc"
			c.Impersonate = client.Impersonation{UserName: "jane", UID: "42", Groups: []string{"a", "b"}, Extra: map[string][]string{"scopes": {"view"}}}
		}, func(h http.Header) string {
			for _, w := range [][2]string{{"Impersonate-User", "jane"}, {"Impersonate-Uid", "42"}, {"Impersonate-Extra-Scopes", "view"}, {"Authorization", "Bearer abc"}} {
				if got := h.Get(w[0]); got != w[1] {
					return fmt.Sprintf("%s %q, want %q", w[0], got, w[1])
				}
			}
			if g := h.Values("Impersonate-Group"); strings.Join(g, ",") != "a,b" {
				return fmt.Sprintf("Impersonate-Group %q", g)
			}
			return ""
		}},
		{"impersonation without a user is sent, for the server to refuse", func(c *client.Config) {
			c.Impersonate = client.Impersonation{Groups: []string{"system:masters"}, Extra: map[string][]string{"example.org/a b": {"v"}}}
		}, func(h http.Header) string {
			if g := h.Get("Impersonate-Group"); g != "system:masters" {
				return fmt.Sprintf("Impersonate-Group %q dropped", g)
			}
			if v := h.Get("Impersonate-Extra-Example.org%2fa%20b"); v != "v" {
				return fmt.Sprintf("escaped extra key missing: %v", h)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, s := tlsServer(t, nil)
			tt.set(cfg)
			if err := getNamespace(t, cfg); err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(s.last(t)); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func want(header, value string) func(http.Header) string {
	return func(h http.Header) string {
		if got := h.Get(header); got != value {
			return fmt.Sprintf("%s %q, want %q", header, got, value)
		}
		return ""
	}
}

// TestPlainHTTPGetsNoCredentials: as with client-go, a token is never
// sent to an http:// server.
func TestPlainHTTPGetsNoCredentials(t *testing.T) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r.Header)
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	for _, cfg := range []*client.Config{{Host: srv.URL, BearerToken: "secret"}, {Host: srv.URL, Username: "u", Password: "p"}} {
		if err := getNamespace(t, cfg); err != nil {
			t.Fatal(err)
		}
		if a := s.last(t).Get("Authorization"); a != "" {
			t.Errorf("Authorization %q sent over plain HTTP", a)
		}
	}
}

// TestRedirectsAreNotFollowed: an answer that redirects is an error, and
// the credentials never reach where it points.
func TestRedirectsAreNotFollowed(t *testing.T) {
	elsewhere := &seen{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.add(r.Header)
	}))
	defer other.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	err := getNamespace(t, &client.Config{Host: srv.URL, CAData: ca, BearerToken: "secret"})
	if err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("a redirect: %v, want an error naming the 302", err)
	}
	if len(elsewhere.headers) != 0 {
		t.Errorf("the redirect was followed, with Authorization %q", elsewhere.headers[0].Get("Authorization"))
	}
}

// TestRequestURLs: the URL of each kind of request, and path segments that
// would name another path refused before anything is sent.
func TestRequestURLs(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Method + " " + r.URL.RequestURI())
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	core, err := client.ForGroup(&client.Config{Host: srv.URL + "/prefix", QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: -1}, schema.GroupVersion{Group: "coordination.k8s.io", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, tt := range []struct {
		req  *client.Request
		want string // "" for refused
	}{
		{core.Get().Resource("nodes").Name("n1"), "GET /prefix/api/v1/nodes/n1"},
		{core.Put().Namespace("x").Resource("pods").Name("p").SubResource("status"), "PUT /prefix/api/v1/namespaces/x/pods/p/status"},
		{core.Get().Resource("pods").VersionedParams(&metav1.ListOptions{FieldSelector: "spec.nodeName=n1", Limit: 500}, metav1.ParameterCodec).Timeout(time.Minute),
			"GET /prefix/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500&timeout=1m0s"},
		{leases.Delete().Namespace("kube-system").Resource("leases").Name("op"), "DELETE /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/op"},
		{core.Delete().Namespace("x").Resource("pods").Name(".."), ""},
		{core.Get().Namespace("x").Resource("pods").Name("a/status"), ""},
		{core.Get().Namespace("%2e%2e").Resource("pods"), ""},
		{core.Get().Resource("nodes").Name(""), ""},
	} {
		got.Store("")
		err := tt.req.Do(ctx).Error()
		switch g := got.Load().(string); {
		case tt.want == "" && (err == nil || g != ""):
			t.Errorf("sent %q (%v), want it refused", g, err)
		case tt.want != "" && (err != nil || g != tt.want):
			t.Errorf("sent %q (%v), want %q", g, err, tt.want)
		}
	}
}

// TestBodyNamesItsKind: a body gets its apiVersion and kind, an option
// type registered in every group those of the request's group.
func TestBodyNamesItsKind(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body.Store(string(b))
		if r.Method == http.MethodPost {
			// A 409 without a Status: on a create, AlreadyExists.
			w.WriteHeader(http.StatusConflict)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	leases, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: -1}, schema.GroupVersion{Group: "coordination.k8s.io", Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := leases.Delete().Namespace("x").Resource("leases").Name("l").Body(&metav1.DeleteOptions{}).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	if b := body.Load().(string); !strings.Contains(b, `"apiVersion":"coordination.k8s.io/v1"`) || !strings.Contains(b, `"kind":"DeleteOptions"`) {
		t.Errorf("DeleteOptions body %s, want the request's group version", b)
	}
	err = leases.Post().Namespace("x").Resource("leases").Body(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}).Do(ctx).Error()
	if b := body.Load().(string); !strings.Contains(b, `"kind":"Lease"`) {
		t.Errorf("Lease body %s, want its kind", b)
	}
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("409 on a create: %v, want AlreadyExists", err)
	}
}

// TestConflictingCredentialsRefused: a token and a password together are
// refused, as client-go refuses them, rather than one chosen silently.
func TestConflictingCredentialsRefused(t *testing.T) {
	_, err := client.ForGroup(&client.Config{Host: "https://127.0.0.1:1", BearerToken: "t", Username: "u", Password: "p"}, corev1.SchemeGroupVersion)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("token and basic auth: %v, want a refusal", err)
	}
}

// TestUntrustedServerIsRefused: a server whose certificate the CA does
// not sign is not talked to.
func TestUntrustedServerIsRefused(t *testing.T) {
	cfg, s := tlsServer(t, nil)
	cfg.CAData = nil
	if err := getNamespace(t, cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("error %v, want a certificate error", err)
	}
	if len(s.headers) != 0 {
		t.Error("a request reached the untrusted server")
	}
}

// TestExecPluginToken: a credential plugin runs once for a token that has
// not expired, again once the API server refuses it, and is told the
// cluster when the kubeconfig asks.
func TestExecPluginToken(t *testing.T) {
	dir := t.TempDir()
	runs, info := filepath.Join(dir, "runs"), filepath.Join(dir, "info")
	plugin := filepath.Join(dir, "get-token")
	script := fmt.Sprintf(`#!/bin/sh
echo run >> %s
printf '%%s' "$KUBERNETES_EXEC_INFO" > %s
n=$(wc -l < %s)
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t'$n'-'$EXTRA'"}}'
`, runs, info, runs)
	if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	var refuseT1 atomic.Bool
	cfg, s := tlsServer(t, func(h http.Header) bool { return refuseT1.Load() && h.Get("Authorization") == "Bearer t1-x" })
	cfg.ExecProvider = &client.ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1",
		Env: []client.ExecEnvVar{{Name: "EXTRA", Value: "x"}}, ProvideClusterInfo: true, InteractiveMode: "Never"}
	c, err := client.ForGroup(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	get := func() error {
		return c.Get().Resource("namespaces").Name("x").Do(t.Context()).Into(&corev1.Namespace{})
	}
	for range 2 {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if a := s.last(t).Get("Authorization"); a != "Bearer t1-x" {
		t.Fatalf("Authorization %q, want the plugin's token", a)
	}
	if n := lines(t, runs); n != 1 {
		t.Fatalf("plugin ran %d times for two requests, want 1", n)
	}
	var in struct {
		Spec struct {
			Cluster struct{ Server string } `json:"cluster"`
		} `json:"spec"`
	}
	data, _ := os.ReadFile(info)
	if err := json.Unmarshal(data, &in); err != nil || in.Spec.Cluster.Server != cfg.Host {
		t.Fatalf("KUBERNETES_EXEC_INFO %s (%v), want the cluster's server %s", data, err, cfg.Host)
	}
	refuseT1.Store(true)
	if err := get(); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a refused token: %v, want Unauthorized", err)
	}
	if err := get(); err != nil {
		t.Fatalf("after a refusal the plugin should run again: %v", err)
	}
	if a := s.last(t).Get("Authorization"); a != "Bearer t2-x" {
		t.Fatalf("Authorization %q after the refusal, want the new token", a)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// TestExecPluginRefusals: what lockstep cannot use is said before any
// request.
func TestExecPluginRefusals(t *testing.T) {
	for _, tt := range []struct {
		name string
		exec client.ExecConfig
		want string
	}{
		{"unknown version", client.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v2"}, "apiVersion"},
		{"interactive", client.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: "Always"}, "terminal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.ForGroup(&client.Config{Host: "https://127.0.0.1:1", ExecProvider: &tt.exec}, corev1.SchemeGroupVersion)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one about %q", err, tt.want)
			}
		})
	}
	cfg, _ := tlsServer(t, nil)
	cfg.ExecProvider = &client.ExecConfig{Command: filepath.Join(t.TempDir(), "missing"), APIVersion: "client.authentication.k8s.io/v1", InstallHint: "install get-token"}
	if err := getNamespace(t, cfg); err == nil || !strings.Contains(err.Error(), "install get-token") {
		t.Fatalf("a missing plugin: %v, want the install hint", err)
	}
}

// TestAnswersAndRetries: a Status answer becomes the API error it names,
// any other failure an error with its HTTP code, and a 429 with
// Retry-After is sent again.
func TestAnswersAndRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch r.URL.Path {
		case "/api/v1/namespaces/missing":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: `namespaces "missing" not found`})
		case "/api/v1/namespaces/proxy":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream gone"))
		case "/api/v1/namespaces/busy":
			if n%2 == 1 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"busy"}}`))
		}
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) (*corev1.Namespace, error) {
		ns := &corev1.Namespace{}
		return ns, c.Get().Resource("namespaces").Name(name).Do(t.Context()).Into(ns)
	}
	if _, err := get("missing"); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `"missing" not found`) {
		t.Errorf("missing: %v, want NotFound with the server's message", err)
	}
	if _, err := get("proxy"); apierrors.ReasonForError(err) == metav1.StatusReasonUnknown || !strings.Contains(err.Error(), "upstream gone") {
		t.Errorf("502: %v (reason %q), want the code's reason and the body", err, apierrors.ReasonForError(err))
	}
	calls.Store(0)
	if ns, err := get("busy"); err != nil || ns.Name != "busy" || calls.Load() != 2 {
		t.Errorf("429 then 200: %v, %v after %d calls; want the namespace after 2", ns, err, calls.Load())
	}
}

// TestWatchDecodesEvents: a watch started after a 429 with Retry-After
// delivers its events typed, an ERROR event as its Status, and one it
// cannot decode ends it with an ERROR.
func TestWatchDecodesEvents(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			t.Errorf("watch request without watch=true: %s", r.URL)
		}
		if tries.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fl := w.(http.Flusher)
		for _, ev := range []string{
			`{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"x","resourceVersion":"5"}}}`,
			`{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"6"}}}`,
			`{"type":"ERROR","object":{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Expired","code":410}}`,
			`{"type":"ADDED","object":{"apiVersion":"v1","kind":"Mystery","metadata":{"name":"m"}}}`,
		} {
			_, _ = w.Write([]byte(ev + "\n"))
			fl.Flush()
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Get().Namespace("x").Resource("pods").Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	next := func() watch.Event {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		return watch.Event{}
	}
	if ev := next(); ev.Type != watch.Added || ev.Object.(*corev1.Pod).Name != "a" {
		t.Fatalf("first event %v %#v", ev.Type, ev.Object)
	}
	if ev := next(); ev.Type != watch.Bookmark || ev.Object.(*corev1.Pod).ResourceVersion != "6" {
		t.Fatalf("second event %v %#v", ev.Type, ev.Object)
	}
	if ev := next(); ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("third event %v %#v", ev.Type, ev.Object)
	}
	if ev := next(); ev.Type != watch.Error || !strings.Contains(apierrors.FromObject(ev.Object).Error(), "unable to decode") {
		t.Fatalf("an event of an unknown kind: %v %#v, want an ERROR saying it could not be decoded", ev.Type, ev.Object)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
		case <-ctx.Done():
			t.Fatal("the watch did not end after an event it could not decode")
		}
	}
}

// TestWatchStop: Stop ends a watch the server keeps open.
func TestWatchStop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Get().Resource("pods").Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event after Stop")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end after Stop")
	}
}

// TestGetRetriedAfterReset: a GET whose connection the server cuts before
// answering is sent again; a POST is not (it may have been carried out).
func TestGetRetriedAfterReset(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 || r.Method == http.MethodPost {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close() // no answer at all
			return
		}
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	if err := c.Get().Resource("namespaces").Name("x").Do(t.Context()).Into(ns); err != nil || ns.Name != "x" || calls.Load() != 2 {
		t.Errorf("GET cut short once: %v, %q after %d calls; want the namespace after 2", err, ns.Name, calls.Load())
	}
	calls.Store(0)
	err = c.Post().Resource("namespaces").Body(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "y"}}).Do(t.Context()).Error()
	if err == nil || calls.Load() != 1 {
		t.Errorf("POST cut short: %v after %d calls; want the error after 1", err, calls.Load())
	}
}

// TestMalformedWatchEventEndsTheWatch: a line of the watch stream that is
// not JSON is an ERROR event, and the end of the watch.
func TestMalformedWatchEventEndsTheWatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}}` + "\n" + `{"type":"ADDED","object":{"kind":` + "}\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Get().Namespace("x").Resource("pods").Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []watch.Event
	timeout := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				done = true
				break
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the watch did not end after a malformed event; events so far: %v", got)
		}
	}
	if len(got) != 2 || got[0].Type != watch.Added || got[1].Type != watch.Error ||
		!strings.Contains(apierrors.FromObject(got[1].Object).Error(), "unable to decode") {
		t.Errorf("events %+v, want ADDED then an ERROR saying it could not be decoded", got)
	}
}

// TestWarningsLoggedOnce: a warning the API server repeats on every answer
// (a deprecated API) is logged the first time only, by its text, by the
// client that received it.
func TestWarningsLoggedOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Warning", `299 - "v1 Thing is deprecated"`)
		w.Header().Add("Warning", `299 - "v1 Thing is deprecated"`)
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	var mu sync.Mutex
	var warnings []string
	prev := slog.Default()
	slog.SetDefault(slog.New(handlerFunc(func(r slog.Record) {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "warning" {
				mu.Lock()
				warnings = append(warnings, a.Value.String())
				mu.Unlock()
			}
			return true
		})
	})))
	defer slog.SetDefault(prev)
	c, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Get().Resource("namespaces").Name("x").Do(t.Context()).Into(&corev1.Namespace{}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) != 1 || warnings[0] != "v1 Thing is deprecated" {
		t.Errorf("warnings logged: %q, want the one warning's text once", warnings)
	}
}

// handlerFunc is a slog.Handler calling fn with every record.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h handlerFunc) WithGroup(string) slog.Handler      { return h }

// TestBurstDefault: a Config without a Burst lets 10 requests through at
// once, as client-go's; the next waits for the QPS.
func TestBurstDefault(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	c, err := client.ForGroup(&client.Config{Host: srv.URL, QPS: 0.001}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) error {
		return c.Get().Resource("namespaces").Name("x").Do(ctx).Into(&corev1.Namespace{})
	}
	burst, cancelBurst := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelBurst()
	for i := range 10 {
		if err := get(burst); err != nil {
			t.Fatalf("request %d of the burst: %v", i+1, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := get(ctx); err == nil {
		t.Error("the 11th request went through at once, want it held for the QPS (one per 1000 s)")
	}
}

// TestClientsOfOneConfigShareConnections: clients of one Config, of any
// group, reuse one connection to the API server.
func TestClientsOfOneConfigShareConnections(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	cfg := &client.Config{Host: srv.URL, QPS: -1}
	core, err := client.ForGroup(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := client.ForGroup(cfg, coordinationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for _, c := range []client.Interface{core, leases} {
			if err := c.Get().Resource("namespaces").Name("x").Do(t.Context()).Into(&corev1.Namespace{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Errorf("6 sequential requests of two clients came over %d connections, want 1", len(remotes))
	}
}
