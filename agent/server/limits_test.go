package server

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// serveLimited starts the API with limits l and returns its socket and
// server.
func serveLimited(t *testing.T, b Backend, l Limits) (string, *APIServer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "lockstep.sock")
	lis, err := ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewAPIServer(b, slog.New(slog.DiscardHandler), NewMetrics(b.Status))
	srv.SetLimits(l)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return sock, srv
}

// TestConnectionCap: past MaxConns open connections, a new one is told to
// try again later at once, not queued; once one closes, the next is
// served.
func TestConnectionCap(t *testing.T) {
	sock, srv := serveLimited(t, &fakeBackend{}, Limits{MaxConns: 2})
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// Both are tracked once each has been served once.
	for _, c := range idle {
		if _, err := c.Write([]byte(`{"version":"` + api.Version + `","op":"status"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := api.NewClient(sock, 2*time.Second).Status(context.Background())
	if api.CodeOf(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), "limit of 2 connections") {
		t.Fatalf("third connection: %v, want try-again-later naming the limit", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusal took %s: the third connection was queued, not answered", took)
	}
	var out strings.Builder
	srv.metrics.WritePrometheus(&out)
	if !strings.Contains(out.String(), "lockstep_api_connections_refused_total 1") {
		t.Errorf("refusal not counted:\n%s", out.String())
	}
	idle[0].Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := api.NewClient(sock, time.Second).Status(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a connection closed, a new one is still refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hungBackend never finishes a CNIDel, whatever its context says: a write
// stuck in fsync on a hung disk.
type hungBackend struct {
	fakeBackend
	started chan struct{}
	release chan struct{}
}

func (h *hungBackend) CNIDel(context.Context, api.Attachment) (*api.DelResponse, error) {
	h.started <- struct{}{}
	<-h.release
	return &api.DelResponse{}, nil
}

// TestDeadlineHoldsWhileBackendHangs: a request whose work cannot be
// interrupted is still answered at its deadline, with code 11, and the
// socket keeps answering other requests meanwhile.
func TestDeadlineHoldsWhileBackendHangs(t *testing.T) {
	h := &hungBackend{started: make(chan struct{}, 8), release: make(chan struct{})}
	defer close(h.release)
	const deadline = 300 * time.Millisecond
	sock, _ := serveLimited(t, h, Limits{RequestTimeout: deadline})

	type answer struct {
		err  error
		took time.Duration
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			start := time.Now()
			_, err := api.NewClient(sock, 5*time.Second).CNIDel(context.Background(), api.Attachment{})
			answers <- answer{err, time.Since(start)}
		}()
	}
	<-h.started
	// While the adds hang, status answers at once.
	for range 5 {
		start := time.Now()
		if _, err := api.NewClient(sock, time.Second).Status(context.Background()); err != nil {
			t.Fatalf("status while adds hang: %v", err)
		}
		if took := time.Since(start); took > deadline/2 {
			t.Errorf("status took %s while adds hang", took)
		}
	}
	for range 3 {
		a := <-answers
		if api.CodeOf(a.err) != api.CodeTryAgainLater || !strings.Contains(a.err.Error(), "could not finish cni-del within 300ms") {
			t.Errorf("hung add answered %v, want try-again-later", a.err)
		}
		if a.took > deadline+time.Second {
			t.Errorf("hung add answered after %s, want about the %s deadline", a.took, deadline)
		}
	}
}

// TestRefusalIsAResponse: a refused connection gets one well-formed
// response line, which a client reads as an error.
func TestRefusalIsAResponse(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	srv := NewAPIServer(&fakeBackend{}, slog.New(slog.DiscardHandler), nil)
	go srv.refuse(a)
	// A request longer than the refusal's buffer is read to its end.
	if _, err := b.Write([]byte(strings.Repeat("x", 10000) + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(b).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var resp api.Response
	if err := json.Unmarshal(line, &resp); err != nil || resp.Error == nil || resp.Error.Code != api.CodeTryAgainLater {
		t.Fatalf("refusal %s (%v), want a try-again-later error", line, err)
	}
}

// TestPluginOutwaitsTheServer: the plugin's client waits longer than the
// server takes to answer at the latest, so the plugin hears "try again
// later" instead of timing out on an ADD the agent may still complete.
func TestPluginOutwaitsTheServer(t *testing.T) {
	if answerBy := RequestTimeout + RequestTimeout/5; answerBy >= api.PluginTimeout {
		t.Errorf("the server answers by %s, the plugin gives up at %s", answerBy, api.PluginTimeout)
	}
}

// TestMonitorCap: monitor streams do not hold the connections MaxConns
// bounds (a CNI request is served while they run), they have a cap of
// their own, a monitor past it is told why, and a monitor that ends
// frees its place.
func TestMonitorCap(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lockstep.sock")
	lis, err := ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{}
	srv := NewAPIServer(b, slog.New(slog.DiscardHandler), NewMetrics(b.Status))
	srv.SetLimits(Limits{MaxConns: 1, MaxMonitors: 1})
	srv.SetMonitor(func(ctx context.Context, _ api.MonitorRequest, ready func() error, _ func(api.Verdict) error) error {
		if err := ready(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	monitor := func(t *testing.T) (net.Conn, api.Response) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		req, _ := json.Marshal(api.Request{Version: api.Version, Op: api.OpMonitor})
		if _, err := c.Write(append(req, '\n')); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("monitor answer: %v", err)
		}
		var resp api.Response
		if err := json.Unmarshal([]byte(line), &resp); err != nil {
			t.Fatal(err)
		}
		return c, resp
	}

	first, resp := monitor(t)
	if resp.Error != nil {
		t.Fatalf("first monitor: %v, want subscribed", resp.Error)
	}
	c := api.NewClient(sock, 2*time.Second)
	if _, err := c.Status(context.Background()); err != nil {
		t.Errorf("status with a monitor running and MaxConns 1: %v, want served", err)
	}
	c.Close()
	waitFor(t, "the status connection untracked", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.conns)-srv.monitors == 0
	})
	_, resp = monitor(t)
	if resp.Error == nil || resp.Error.Code != api.CodeTryAgainLater || !strings.Contains(resp.Error.Msg, "limit of 1 monitor streams") {
		t.Errorf("second monitor: %+v, want try-again-later naming the monitor limit", resp.Error)
	}
	first.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, resp := monitor(t)
		if resp.Error == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("monitor after the first closed: %v, want its place freed", resp.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, failing after 2 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 2s", what)
		}
	}
}
