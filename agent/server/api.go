package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// Backend is what the API serves: in the agent, endpoints.Service with
// the CNI operations of podnet.Handler.
//
// CNIAdd and CNICheck get the pod's network namespace as an open file the
// server has verified is one (an nsfs handle on a network namespace other
// than the agent's own): nil for a CHECK whose runtime passed none. The
// server closes it once the call returns; the backend must not keep it.
type Backend interface {
	CNIAdd(context.Context, api.CNIAddRequest, *os.File) (*api.CNIAddResponse, error)
	CNIDel(context.Context, api.Attachment) (*api.DelResponse, error)
	CNICheck(context.Context, api.CNICheckRequest, *os.File) (*api.CNICheckResponse, error)
	Add(context.Context, api.AddRequest) (*api.AddResponse, error)
	Confirm(context.Context, api.OpRequest) error
	Abort(context.Context, api.OpRequest) error
	Del(context.Context, api.Attachment) (*api.DelResponse, error)
	Get(context.Context, api.Attachment) (*api.Endpoint, error)
	GC(context.Context, api.GCRequest) (*api.GCResponse, error)
	Status(context.Context) (*api.StatusResponse, error)
}

// Explainer is a Backend that also answers api.OpExplain: the agent is
// one; a Backend that is not (a test's) answers it as an unknown
// operation.
type Explainer interface {
	Explain(context.Context, api.ExplainRequest) (any, error)
}

// Timeouts and limits of the API server.
const (
	// RequestTimeout bounds the work the agent does for one request (its
	// context's deadline). A request whose work cannot be interrupted (an
	// fsync on a hung disk) is answered CodeTryAgainLater a fifth of it
	// later anyway. A cni-add does all its steps within it: two durable
	// writes, the wiring (a few milliseconds of netlink) and the policy
	// sync, which in Kubernetes mode may wait up to agent.PodObjectWait
	// (3 s) for the pod's object; an ADD that fails at its deadline still
	// rolls back (podnet bounds that by 2 s more), well inside the ADD's
	// lease (endpoints.DefaultAddLease, 10 s).
	RequestTimeout = 5 * time.Second
	// MaxConns bounds the connections open at once. A connection past it
	// is answered CodeTryAgainLater and closed, so a flood of clients (or
	// of plugins stuck behind a hung disk) cannot exhaust the agent.
	// Monitor streams do not count against it once they are known to be
	// one: they have MaxMonitors of their own.
	MaxConns = 256
	// MaxMonitors bounds the monitor streams open at once, apart from
	// MaxConns, so that `lockstep monitor`s left running can never take
	// the connections the runtime's CNI ADDs and DELs need. A monitor past
	// it is answered CodeTryAgainLater.
	MaxMonitors = 16
	// IdleTimeout closes a connection that sends nothing for this long.
	IdleTimeout = 30 * time.Second
	// writeTimeout bounds writing one response to a slow client.
	writeTimeout = 5 * time.Second
)

// handler runs one operation on a raw JSON body and, for the operations
// that take one, the pod's network namespace.
type handler func(ctx context.Context, body json.RawMessage, netns *os.File) (any, error)

// How an operation takes a descriptor (see api.OpCNIAdd).
const (
	fdRefused  = iota // a request that passes one is refused
	fdRequired        // the pod's netns, verified
	fdOptional        // the pod's netns if passed, verified
	fdIgnored         // accepted and closed unread
)

// fdPolicy is how each operation takes a descriptor; those not listed
// refuse one.
var fdPolicy = map[string]int{
	api.OpCNIAdd:   fdRequired,
	api.OpCNICheck: fdOptional,
	api.OpCNIDel:   fdIgnored,
}

// APIServer serves the agent API (JSON lines, see package api) on a
// listener.
type APIServer struct {
	log      *slog.Logger
	metrics  *Metrics
	handlers map[string]handler

	limits Limits
	// netnsCheck verifies a passed namespace: verifyNetns, or a test's.
	netnsCheck func(*os.File) error
	monitor    Monitor // api.OpMonitor, when set
	mu         sync.Mutex
	lis        net.Listener
	conns      map[net.Conn]bool // true: a monitor stream
	monitors   int               // the conns that are monitor streams
	closing    bool
	inFlight   sync.WaitGroup
}

// Limits bound what the API server takes on; zero fields take the
// package defaults (MaxConns, MaxMonitors, RequestTimeout).
type Limits struct {
	MaxConns       int
	MaxMonitors    int
	RequestTimeout time.Duration
}

// SetLimits replaces the server's limits. Call it before Serve.
func (s *APIServer) SetLimits(l Limits) {
	if l.MaxConns <= 0 {
		l.MaxConns = MaxConns
	}
	if l.MaxMonitors <= 0 {
		l.MaxMonitors = MaxMonitors
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = RequestTimeout
	}
	s.limits = l
}

// SetNetnsCheck replaces how the server verifies a namespace a client
// passes (by default: an nsfs handle on a network namespace other than the
// agent's own). Tests that cannot create namespaces use it to pass other
// files; the agent never calls it. Call it before Serve.
func (s *APIServer) SetNetnsCheck(check func(*os.File) error) { s.netnsCheck = check }

// NewAPIServer returns a server for b.
func NewAPIServer(b Backend, log *slog.Logger, m *Metrics) *APIServer {
	s := &APIServer{
		log:        log,
		metrics:    m,
		limits:     Limits{MaxConns: MaxConns, MaxMonitors: MaxMonitors, RequestTimeout: RequestTimeout},
		netnsCheck: verifyNetns,
		conns:      map[net.Conn]bool{},
		handlers: map[string]handler{
			api.OpCNIAdd:   withNetns(b.CNIAdd),
			api.OpCNIDel:   withBody(b.CNIDel),
			api.OpCNICheck: withNetns(b.CNICheck),
			api.OpAdd:      withBody(b.Add),
			api.OpConfirm:  withBody(func(ctx context.Context, r api.OpRequest) (any, error) { return nil, b.Confirm(ctx, r) }),
			api.OpAbort:    withBody(func(ctx context.Context, r api.OpRequest) (any, error) { return nil, b.Abort(ctx, r) }),
			api.OpDel:      withBody(b.Del),
			api.OpGet:      withBody(b.Get),
			api.OpGC:       withBody(b.GC),
			api.OpStatus:   func(ctx context.Context, _ json.RawMessage, _ *os.File) (any, error) { return b.Status(ctx) },
		},
	}
	if h := explainHandler(b); h != nil {
		s.handlers[api.OpExplain] = h
	}
	return s
}

// explainHandler answers api.OpExplain when b is an Explainer.
func explainHandler(b Backend) handler {
	e, ok := b.(Explainer)
	if !ok {
		return nil
	}
	return withBody(e.Explain)
}

// withBody adapts a typed backend call to a raw JSON body.
func withBody[Req, Resp any](fn func(context.Context, Req) (Resp, error)) handler {
	return withNetns(func(ctx context.Context, req Req, _ *os.File) (Resp, error) { return fn(ctx, req) })
}

// withNetns adapts a typed backend call that takes the pod's network
// namespace to a raw JSON body.
func withNetns[Req, Resp any](fn func(context.Context, Req, *os.File) (Resp, error)) handler {
	return func(ctx context.Context, body json.RawMessage, netns *os.File) (any, error) {
		var req Req
		if len(body) > 0 {
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, api.Errorf(api.CodeDecodeFailure, "decode request: %v", err)
			}
		}
		return fn(ctx, req, netns)
	}
}

// Serve accepts connections until Shutdown; it returns nil after Shutdown.
func (s *APIServer) Serve(lis net.Listener) error {
	s.mu.Lock()
	s.lis = lis
	s.mu.Unlock()
	for {
		conn, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept on %s: %w", lis.Addr(), err)
		}
		switch s.track(conn, true) {
		case trackClosing:
			conn.Close()
			return nil
		case trackFull:
			go s.refuse(conn)
			continue
		}
		go s.serveConn(conn)
	}
}

// Answers of track.
const (
	trackOK      = iota
	trackClosing // the server is shutting down
	trackFull    // MaxConns connections are open
)

// track adds conn to, or removes it from, the open connections.
func (s *APIServer) track(conn net.Conn, add bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !add:
		if s.conns[conn] {
			s.monitors--
		}
		delete(s.conns, conn)
	case s.closing:
		return trackClosing
	case len(s.conns)-s.monitors >= s.limits.MaxConns:
		return trackFull
	default:
		s.conns[conn] = false
	}
	return trackOK
}

// takeMonitor makes conn, tracked, a monitor stream: it leaves the
// connections MaxConns bounds for the MaxMonitors streams. False when
// those are all taken.
func (s *APIServer) takeMonitor(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.monitors >= s.limits.MaxMonitors {
		return false
	}
	s.conns[conn] = true
	s.monitors++
	return true
}

// serveConn answers requests on one connection, one at a time.
func (s *APIServer) serveConn(conn net.Conn) {
	defer func() {
		s.track(conn, false)
		conn.Close()
	}()
	in := newRightsReader(conn)
	defer in.discard() // descriptors that came with an unfinished line
	r := bufio.NewReader(in)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(IdleTimeout))
		line, err := api.ReadLine(r, api.MaxLine)
		if errors.Is(err, api.ErrLineTooLong) {
			s.reply(conn, api.Response{Error: api.Errorf(api.CodeIOFailure, "request longer than %d bytes", api.MaxLine)})
			return
		}
		if err != nil {
			return // closed, idle or shutting down
		}
		// Descriptors belong to the line they arrived with. The client
		// sends one request at a time; bytes already read past this line
		// mean another request came with it, and then whose descriptors
		// they are cannot be told.
		files, fdErr := in.take(r.Buffered() > 0)
		if body, ok := s.isMonitor(line); ok && fdErr == nil && len(files) == 0 {
			if !s.takeMonitor(conn) {
				s.reply(conn, api.Response{Error: &api.Error{
					Code:    api.CodeTryAgainLater,
					Msg:     fmt.Sprintf("lockstep agent is serving its limit of %d monitor streams", s.limits.MaxMonitors),
					Details: "stop a lockstep monitor that is still running on this node, then try again",
				}})
				return
			}
			s.serveMonitor(conn, r, body)
			return
		}
		if !s.begin() {
			closeAll(files)
			return
		}
		resp := s.dispatch(line, files, fdErr)
		ok := s.reply(conn, resp)
		s.inFlight.Done()
		if !ok {
			return
		}
	}
}

// begin registers an in-flight request unless the server is shutting down.
func (s *APIServer) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.inFlight.Add(1)
	return true
}

// dispatch answers one request line. It owns files, the descriptors that
// came with the line: every one is closed, by dispatch or, once handed to
// the backend, when the backend's call returns.
func (s *APIServer) dispatch(line []byte, files []*os.File, fdErr error) api.Response {
	defer func() { closeAll(files) }()
	start := time.Now()
	var req api.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return api.Response{Error: api.Errorf(api.CodeDecodeFailure, "decode request: %v", err)}
	}
	var out any
	var err error
	switch fn, known := s.handlers[req.Op]; {
	case req.Version != api.Version:
		err = api.Errorf(api.CodeIncompatibleVersion,
			"client speaks lockstep API %q, this agent speaks %q; install matching lockstep binaries (lockstep install-cni)", req.Version, api.Version)
	case !known:
		err = api.Errorf(api.CodeIncompatibleVersion, "lockstep agent has no operation %q in API %s", req.Op, api.Version)
	default:
		var netns *os.File
		if netns, err = s.netnsOf(req.Op, files, fdErr); err == nil {
			if netns != nil {
				files = nil // netns is the only one; the call closes it
			}
			out, err = s.call(req.Op, fn, req.Body, netns)
		}
	}

	var resp api.Response
	code := 0
	if err != nil {
		var apiErr *api.Error
		if !errors.As(err, &apiErr) {
			apiErr = &api.Error{Code: api.CodeInternal, Msg: "lockstep agent internal error", Details: err.Error()}
		}
		resp.Error, code = apiErr, int(apiErr.Code)
		if apiErr.Code == api.CodeInternal {
			s.log.Error("request failed", "op", req.Op, "err", apiErr)
		}
	} else if out != nil {
		body, merr := json.Marshal(out)
		if merr != nil {
			resp.Error, code = api.Errorf(api.CodeInternal, "encode %s response: %v", req.Op, merr), api.CodeInternal
		} else {
			resp.Body = body
		}
	}
	if s.handlers[req.Op] != nil {
		s.metrics.observeRequest(req.Op, code, time.Since(start))
	}
	return resp
}

func (s *APIServer) reply(conn net.Conn, resp api.Response) bool {
	line, err := json.Marshal(resp)
	if err != nil {
		line, _ = json.Marshal(api.Response{Error: api.Errorf(api.CodeInternal, "encode response: %v", err)})
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = conn.Write(append(line, '\n'))
	return err == nil
}

// Shutdown stops accepting, lets requests in flight finish (until ctx
// ends), and closes every connection.
func (s *APIServer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	if s.lis != nil {
		s.lis.Close()
	}
	for conn := range s.conns {
		// Wake connections waiting for a request; one being answered
		// finishes its reply first.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("shut down API: %w", ctx.Err())
	}
	s.mu.Lock()
	for conn := range s.conns {
		conn.Close()
	}
	s.mu.Unlock()
	return err
}

// ListenSocket listens on a unix socket readable only by root (0600). A
// stale socket file from a crashed agent is replaced; a live one is not.
func ListenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if conn, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		conn.Close()
		return nil, fmt.Errorf("listen on %s: another lockstep agent is serving it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	// Create the socket with no group/other bits from the start.
	l, err := listenUnixPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	return l, nil
}
