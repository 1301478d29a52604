package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// Backend is what the API serves; endpoints.Service implements it.
type Backend interface {
	Add(context.Context, api.AddRequest) (*api.AddResponse, error)
	Confirm(context.Context, api.OpRequest) error
	Abort(context.Context, api.OpRequest) error
	Del(context.Context, api.Attachment) (*api.DelResponse, error)
	Get(context.Context, api.Attachment) (*api.Endpoint, error)
	GC(context.Context, api.GCRequest) (*api.GCResponse, error)
	Status(context.Context) (*api.StatusResponse, error)
}

// RequestTimeout bounds the work the agent does for one request.
const RequestTimeout = 5 * time.Second

const maxBody = 4 << 20

// Handler returns the API handler.
func Handler(b Backend, log *slog.Logger, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	route := func(path string, fn func(context.Context, []byte) (any, error)) {
		mux.Handle(path, instrument(m, path, log, fn))
	}
	route(api.PathAdd, withBody(b.Add))
	route(api.PathConfirm, withBody(func(ctx context.Context, r api.OpRequest) (any, error) { return struct{}{}, b.Confirm(ctx, r) }))
	route(api.PathAbort, withBody(func(ctx context.Context, r api.OpRequest) (any, error) { return struct{}{}, b.Abort(ctx, r) }))
	route(api.PathDel, withBody(b.Del))
	route(api.PathGet, withBody(b.Get))
	route(api.PathGC, withBody(b.GC))
	route(api.PathStatus, func(ctx context.Context, _ []byte) (any, error) { return b.Status(ctx) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeIncompatibleVersion, "lockstep agent has no API path %s (it speaks %s)", r.URL.Path, api.Version))
	})
	return mux
}

// withBody adapts a typed backend call to raw JSON in and any out.
func withBody[Req, Resp any](fn func(context.Context, Req) (Resp, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, body []byte) (any, error) {
		var req Req
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, api.Errorf(api.CodeDecodeFailure, "decode request: %v", err)
		}
		return fn(ctx, req)
	}
}

func instrument(m *Metrics, path string, log *slog.Logger, fn func(context.Context, []byte) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var err error
		defer func() {
			code := 0
			var apiErr *api.Error
			if errors.As(err, &apiErr) {
				code = int(apiErr.Code)
			}
			m.observeRequest(path, code, time.Since(start))
			if err != nil && code == api.CodeInternal {
				log.Error("request failed", "path", path, "err", err)
			}
		}()
		if v := r.Header.Get(api.VersionHeader); v != api.Version {
			err = api.Errorf(api.CodeIncompatibleVersion, "client speaks lockstep API %q, this agent speaks %q; install matching lockstep binaries (lockstep install-cni)", v, api.Version)
			writeError(w, err)
			return
		}
		body, rerr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if rerr != nil {
			err = api.Errorf(api.CodeIOFailure, "read request: %v", rerr)
			writeError(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), RequestTimeout)
		defer cancel()
		var resp any
		resp, err = fn(ctx, body)
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
}

func writeError(w http.ResponseWriter, err error) {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		apiErr = &api.Error{Code: api.CodeInternal, Msg: "lockstep agent internal error", Details: err.Error()}
	}
	status := http.StatusUnprocessableEntity
	if apiErr.Code == api.CodeInternal {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Lockstep-Error-Code", strconv.Itoa(int(apiErr.Code)))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiErr)
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

// NewAPIServer returns the http.Server for the API with deadlines that keep
// a stuck client from holding the agent.
func NewAPIServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      RequestTimeout + 5*time.Second,
		IdleTimeout:       30 * time.Second,
	}
}
