package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// fakeBackend answers Status and fails CNIDel with a configured error.
type fakeBackend struct {
	mu     sync.Mutex
	delErr error
}

func (f *fakeBackend) setDelErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delErr = err
}

func (f *fakeBackend) CNIAdd(_ context.Context, _ api.CNIAddRequest, netns *os.File) (*api.CNIAddResponse, error) {
	return &api.CNIAddResponse{PodIf: api.Interface{Name: netns.Name()}}, nil
}
func (f *fakeBackend) CNIDel(context.Context, api.Attachment) (*api.DelResponse, error) {
	f.mu.Lock()
	err := f.delErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &api.DelResponse{Found: true, HostIfName: "lsx"}, nil
}
func (f *fakeBackend) CNICheck(context.Context, api.CNICheckRequest, *os.File) (*api.CNICheckResponse, error) {
	return &api.CNICheckResponse{}, nil
}
func (f *fakeBackend) Add(context.Context, api.AddRequest) (*api.AddResponse, error) {
	return &api.AddResponse{OpID: 42}, nil
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
	srv := NewAPIServer(b, slog.New(slog.DiscardHandler), NewMetrics(b.Status))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return sock
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

	resp, err := c.CNIDel(ctx, api.Attachment{ContainerID: "c", IfName: "eth0"})
	if err != nil || resp.HostIfName != "lsx" {
		t.Fatalf("cni-del: %+v %v", resp, err)
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
		b.setDelErr(tc.err)
		_, err := c.CNIDel(ctx, api.Attachment{})
		if api.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
	if _, err := c.Get(ctx, api.Attachment{}); api.CodeOf(err) != api.CodeUnknownContainer {
		t.Errorf("get unknown: %v", err)
	}
}

// TestProtocolErrorsAreExplained speaks the line protocol by hand.
func TestProtocolErrorsAreExplained(t *testing.T) {
	conn, err := net.Dial("unix", serve(t, &fakeBackend{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	tests := []struct {
		line string
		code uint
		want string
	}{
		{`{"v":"v1","op":"status"}`, 0, `"free":3`},
		{`{"v":"v2","op":"status"}`, api.CodeIncompatibleVersion, "this agent speaks"},
		{`{"v":"v1","op":"explode"}`, api.CodeIncompatibleVersion, "no operation"},
		{`{"v":"v1","op":"cni-del","body":"not an object"}`, api.CodeDecodeFailure, "decode request"},
		{`not json`, api.CodeDecodeFailure, "decode request"},
	}
	for _, tc := range tests {
		if _, err := conn.Write([]byte(tc.line + "\n")); err != nil {
			t.Fatal(err)
		}
		raw, err := api.ReadLine(r, api.MaxLine)
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		var resp api.Response
		if err := json.Unmarshal(raw, &resp); err != nil {
			t.Fatal(err)
		}
		got := uint(0)
		if resp.Error != nil {
			got = resp.Error.Code
		}
		if got != tc.code || !strings.Contains(string(raw), tc.want) {
			t.Errorf("%s: got %s, want code %d containing %q", tc.line, raw, tc.code, tc.want)
		}
	}
}

// TestShutdownFinishesInFlight: a request being served when Shutdown starts
// still gets its answer; then the connection closes.
func TestShutdownFinishesInFlight(t *testing.T) {
	slow := &slowBackend{release: make(chan struct{}), started: make(chan struct{})}
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewAPIServer(slow, slog.New(slog.DiscardHandler), NewMetrics(slow.Status))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	c := api.NewClient(sock, 5*time.Second)
	answered := make(chan error, 1)
	go func() {
		_, err := c.CNIDel(context.Background(), api.Attachment{})
		answered <- err
	}()
	<-slow.started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	close(slow.release)
	if err := <-answered; err != nil {
		t.Fatalf("in-flight request lost on shutdown: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if _, err := c.Status(context.Background()); api.CodeOf(err) != api.CodeTryAgainLater {
		t.Fatalf("call after shutdown: %v", err)
	}
}

type slowBackend struct {
	fakeBackend
	started, release chan struct{}
}

func (s *slowBackend) CNIDel(context.Context, api.Attachment) (*api.DelResponse, error) {
	close(s.started)
	<-s.release
	return &api.DelResponse{}, nil
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
		if api.CodeOf(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), sock) {
			t.Errorf("%s: got %v", sock, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: failed after %s, want about the 300ms timeout", sock, took)
		}
	}
}

func TestMetrics(t *testing.T) {
	b := &fakeBackend{}
	m := NewMetrics(b.Status)
	m.observeRequest(api.OpCNIAdd, 0, time.Millisecond)
	var out strings.Builder
	m.WritePrometheus(&out)
	for _, want := range []string{
		`lockstep_pool_addresses{pool="p",state="free"} 3`,
		`lockstep_api_requests_total{op="cni-add",code="0"} 1`,
		"# TYPE process_resident_memory_bytes gauge",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
