package ops

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	pass := func(context.Context) error { return nil }
	waiting := func(context.Context) error {
		return errors.New("waiting for the NodeIPAM of node a\nto assign it blocks")
	}
	stalled := func(context.Context) error { return errors.New("loop enforcer last turned 4m0s ago (deadline 3m0s)") }
	h := Handler(Endpoints{
		Live:    []Check{{"loops", pass}},
		Ready:   []Check{{"loops", pass}, {"start-up", waiting}},
		Metrics: func(w io.Writer) { io.WriteString(w, "lockstep_up 1\n") },
	})
	stalledH := Handler(Endpoints{Live: []Check{{"loops", stalled}}})

	tests := []struct {
		name     string
		h        http.Handler
		target   string
		wantCode int
		// wantBody is the whole body when exact, else substrings of it.
		wantBody string
		exact    bool
		contains []string
		lacks    []string
	}{
		{name: "live", h: h, target: "/healthz", wantCode: 200, wantBody: "ok", exact: true},
		{name: "livez is healthz", h: stalledH, target: "/livez", wantCode: 503, contains: []string{"[-]loops failed", "livez check failed"}},
		{
			name: "live verbose", h: h, target: "/healthz?verbose", wantCode: 200,
			wantBody: "[+]loops ok\nhealthz check passed\n", exact: true,
		},
		{
			name: "a stalled loop fails liveness and is named", h: stalledH, target: "/healthz", wantCode: 503,
			wantBody: "[-]loops failed: loop enforcer last turned 4m0s ago (deadline 3m0s)\nhealthz check failed\n", exact: true,
		},
		{
			name: "not ready says what it waits for, on one line", h: h, target: "/readyz", wantCode: 503,
			wantBody: "[+]loops ok\n[-]start-up failed: waiting for the NodeIPAM of node a; to assign it blocks\nreadyz check failed\n", exact: true,
		},
		{
			name: "a check can be excluded", h: h, target: "/readyz?exclude=start-up", wantCode: 200,
			wantBody: "ok", exact: true,
		},
		{
			name: "excluding an unknown check warns", h: h, target: "/readyz?exclude=start-up&exclude=nope&verbose", wantCode: 200,
			contains: []string{"[+]start-up excluded: ok", `no matches for "nope"`, "readyz check passed"},
		},
		{name: "one check that passes", h: h, target: "/readyz/loops", wantCode: 200, wantBody: "ok", exact: true},
		{
			name: "one check that fails", h: h, target: "/readyz/start-up", wantCode: 503,
			contains: []string{"start-up failed: waiting for the NodeIPAM"},
		},
		{name: "an unknown check", h: h, target: "/readyz/nope", wantCode: 404},
		{name: "metrics", h: h, target: "/metrics", wantCode: 200, wantBody: "lockstep_up 1\n", exact: true},
		{name: "no metrics configured", h: stalledH, target: "/metrics", wantCode: 404},
		{name: "only GET", h: h, target: "POST /healthz", wantCode: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, target := http.MethodGet, tt.target
			if m, rest, ok := strings.Cut(tt.target, " "); ok {
				method, target = m, rest
			}
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
			body := rec.Body.String()
			if rec.Code != tt.wantCode {
				t.Fatalf("%s %s: code %d, want %d; body %q", method, target, rec.Code, tt.wantCode, body)
			}
			if tt.exact && body != tt.wantBody {
				t.Errorf("%s %s: body %q, want %q", method, target, body, tt.wantBody)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("%s %s: body %q lacks %q", method, target, body, s)
				}
			}
			if rec.Code == 200 || rec.Code == 503 {
				if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("Content-Type %q, want text/plain", ct)
				}
			}
		})
	}
}

func TestListenReportsTheRealAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", ":0"} {
		s, err := Listen(addr, Handler(Endpoints{Live: []Check{{"loops", func(context.Context) error { return nil }}}}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Serve() }()
		got := s.Addr()
		if strings.HasSuffix(got, ":0") {
			t.Errorf("Listen(%q).Addr() = %q, want the port the kernel chose", addr, got)
		}
		_, port, err := net.SplitHostPort(got)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
		if err != nil {
			t.Fatalf("Listen(%q): GET /healthz on %s: %v", addr, got, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Errorf("Listen(%q): /healthz = %d %q", addr, resp.StatusCode, body)
		}
		if err := s.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Shutdown = %v, want nil", err)
		}
	}
}
