package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// fakeBackend answers Status and fails Add with a configured error.
type fakeBackend struct {
	addErr error
}

func (f *fakeBackend) Add(context.Context, api.AddRequest) (*api.AddResponse, error) {
	if f.addErr != nil {
		return nil, f.addErr
	}
	return &api.AddResponse{OpID: 42, HostIfName: "lsx"}, nil
}
func (f *fakeBackend) Confirm(context.Context, api.OpRequest) error { return nil }
func (f *fakeBackend) Abort(context.Context, api.OpRequest) error   { return nil }
func (f *fakeBackend) Del(context.Context, api.Attachment) (*api.DelResponse, error) {
	return &api.DelResponse{}, nil
}
func (f *fakeBackend) Get(context.Context, api.Attachment) (*api.Endpoint, error) {
	return nil, api.Errorf(api.CodeUnknownContainer, "no record")
}
func (f *fakeBackend) GC(context.Context, api.GCRequest) (*api.GCResponse, error) {
	return &api.GCResponse{}, nil
}
func (f *fakeBackend) Status(context.Context) (*api.StatusResponse, error) {
	return &api.StatusResponse{Pools: []api.PoolStatus{{Name: "p", Free: 3}}}, nil
}

// serve starts the API on a socket in a temp dir and returns its path.
func serve(t *testing.T, b Backend) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "lockstep.sock")
	lis, err := ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewAPIServer(Handler(b, slog.New(slog.DiscardHandler), NewMetrics(b.Status)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

func apiCode(err error) uint {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestSocketIsPrivate(t *testing.T) {
	sock := serve(t, &fakeBackend{})
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want srw-------", st.Mode())
	}
	// A second agent must not steal a live socket.
	if _, err := ListenSocket(sock); err == nil || !strings.Contains(err.Error(), "another lockstep agent") {
		t.Fatalf("second listen: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lockstep.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// Leave the file behind, as a crashed agent does.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	lis, err = ListenSocket(sock)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	lis.Close()
}

func TestRoundTripAndErrors(t *testing.T) {
	b := &fakeBackend{}
	c := api.NewClient(serve(t, b), 0)
	ctx := context.Background()

	resp, err := c.Add(ctx, api.AddRequest{Attachment: api.Attachment{ContainerID: "c", IfName: "eth0"}, Netns: "/x"})
	if err != nil || resp.OpID != 42 {
		t.Fatalf("add: %+v %v", resp, err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Pools[0].Free != 3 {
		t.Fatalf("status: %+v %v", st, err)
	}
	tests := []struct {
		name   string
		err    error
		code   uint
		substr string
	}{
		{"agent error keeps its code", api.Errorf(api.CodePoolExhausted, "pool 10.0.0.0/30 exhausted"), api.CodePoolExhausted, "10.0.0.0/30"},
		{"plain error becomes internal", errors.New("disk on fire"), api.CodeInternal, "disk on fire"},
	}
	for _, tc := range tests {
		b.addErr = tc.err
		_, err := c.Add(ctx, api.AddRequest{})
		if apiCode(err) != tc.code || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
	if _, err := c.Get(ctx, api.Attachment{}); apiCode(err) != api.CodeUnknownContainer {
		t.Errorf("get unknown: %v", err)
	}
}

func TestVersionMismatchIsExplained(t *testing.T) {
	sock := serve(t, &fakeBackend{})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, path := range []string{api.PathStatus, "/v2/status"} {
		req, _ := http.NewRequest(http.MethodGet, "http://lockstep"+path, nil)
		req.Header.Set(api.VersionHeader, "v2")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), `"code":1`) {
			t.Errorf("%s with version v2: HTTP %d %s", path, resp.StatusCode, body)
		}
	}
}

// TestClientNeverHangs: an agent that accepts but never answers, and one
// that is not there, both fail with code 11 within the client timeout.
func TestClientNeverHangs(t *testing.T) {
	dir := t.TempDir()
	hung := filepath.Join(dir, "hung.sock")
	lis, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // read nothing, answer nothing
		}
	}()
	for _, sock := range []string{hung, filepath.Join(dir, "absent.sock")} {
		start := time.Now()
		_, err := api.NewClient(sock, 300*time.Millisecond).Status(context.Background())
		if apiCode(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), sock) {
			t.Errorf("%s: got %v", sock, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: failed after %s, want about the 300ms timeout", sock, took)
		}
	}
}

func TestOpsHandler(t *testing.T) {
	b := &fakeBackend{}
	m := NewMetrics(b.Status)
	m.observeRequest(api.PathAdd, 0, time.Millisecond)
	h := OpsHandler(m, func(context.Context) error { return nil })
	srv := &http.Server{Handler: h}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get("http://" + lis.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	if got := get("/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		`lockstep_pool_addresses{pool="p",state="free"} 3`,
		`lockstep_api_requests_total{path="/v1/add",code="0"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
