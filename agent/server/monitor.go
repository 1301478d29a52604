package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// Monitor streams verdicts: once subscribed it calls ready (which answers
// the request), then send with each verdict req selects until ctx ends
// (the subscriber's connection closed, or the server shuts down) or send
// fails, and returns. An error it returns before ready (a bad filter, no
// events on this dataplane) is the subscriber's answer.
type Monitor func(ctx context.Context, req api.MonitorRequest, ready func() error, send func(api.Verdict) error) error

// SetMonitor makes the server answer api.OpMonitor with m. Call it before
// Serve.
func (s *APIServer) SetMonitor(m Monitor) { s.monitor = m }

// isMonitor reports whether line is a monitor request this server
// streams, and its body.
func (s *APIServer) isMonitor(line []byte) (json.RawMessage, bool) {
	var req api.Request
	if s.monitor == nil || json.Unmarshal(line, &req) != nil || req.Op != api.OpMonitor || req.Version != api.Version {
		return nil, false
	}
	return req.Body, true
}

// serveMonitor turns conn into a verdict stream: one empty response,
// then a line per verdict until the client closes the connection (the
// subscription ends with it, however the client went) or the server
// shuts down.
func (s *APIServer) serveMonitor(conn net.Conn, r *bufio.Reader, body json.RawMessage) {
	var req api.MonitorRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			s.reply(conn, api.Response{Error: api.Errorf(api.CodeDecodeFailure, "decode request: %v", err)})
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client sends nothing more: a read returns when it closes the
	// connection, or when Shutdown sets a past deadline.
	_ = conn.SetReadDeadline(time.Time{})
	go func() {
		_, _ = io.Copy(io.Discard, r)
		cancel()
	}()
	started := false
	ready := func() error {
		started = true
		if !s.reply(conn, api.Response{}) {
			return net.ErrClosed
		}
		return nil
	}
	send := func(v api.Verdict) error {
		line, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = conn.Write(append(line, '\n'))
		return err
	}
	if err := s.monitor(ctx, req, ready, send); err != nil && !started {
		var apiErr *api.Error
		if !errors.As(err, &apiErr) {
			apiErr = api.Errorf(api.CodeInternal, "monitor: %v", err)
		}
		s.reply(conn, api.Response{Error: apiErr})
	}
}
