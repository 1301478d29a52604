package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// call runs fn under the request deadline and returns its answer, or, once
// the deadline passes, a CodeTryAgainLater error without waiting for it.
// The backend gives up by itself where it can (a request queued behind
// the store's writer gives up at its context's deadline, and its own, more
// precise, answer comes first: the server waits a fifth of the timeout
// longer before it answers for it); where it
// cannot (an fsync on a hung disk does not return), fn goes on in the
// background, counted in flight so Shutdown waits for it, and its late
// answer is dropped: the runtime's retry finds whatever it left (an ADD
// still in flight is answered busy until its lease ends).
//
// netns, when not nil, is closed once fn returns, whenever that is.
func (s *APIServer) call(op string, fn handler, body json.RawMessage, netns *os.File) (any, error) {
	timeout := s.limits.RequestTimeout
	answerBy := time.NewTimer(timeout + timeout/5)
	defer answerBy.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	type result struct {
		out any
		err error
	}
	done := make(chan result, 1)
	s.inFlight.Add(1)
	go func() {
		defer s.inFlight.Done()
		defer cancel()
		out, err := fn(ctx, body, netns)
		if netns != nil {
			netns.Close()
		}
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-answerBy.C:
	}
	s.log.Warn("request outlived its deadline; answered try-again-later, its work goes on in the background",
		"op", op, "deadline", timeout, "hint", "the state file's disk may be slow or hung: see lockstep_state_write_duration_seconds")
	return nil, &api.Error{
		Code: api.CodeTryAgainLater,
		Msg:  fmt.Sprintf("lockstep agent could not finish %s within %s", op, timeout),
		Details: "the agent records every change durably before it answers and its state file's disk is slow or hung " +
			"(or the agent is overloaded); the runtime retries",
	}
}

// refuseTimeout bounds answering a connection past MaxConns.
const refuseTimeout = time.Second

// refuse answers a connection past MaxConns with CodeTryAgainLater and
// closes it. It reads (and discards, a buffer at a time) the first request
// line, if one comes within refuseTimeout, so the client's write does not
// fail and it reads why; the agent does not act on it.
func (s *APIServer) refuse(conn net.Conn) {
	defer conn.Close()
	s.metrics.observeRefused()
	_ = conn.SetReadDeadline(time.Now().Add(refuseTimeout))
	r := bufio.NewReaderSize(conn, 4096)
	for {
		if _, err := r.ReadSlice('\n'); !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	line, _ := json.Marshal(api.Response{Error: &api.Error{
		Code:    api.CodeTryAgainLater,
		Msg:     fmt.Sprintf("lockstep agent is serving its limit of %d connections", s.limits.MaxConns),
		Details: "the request was not read; the runtime retries",
	}})
	_ = conn.SetWriteDeadline(time.Now().Add(refuseTimeout))
	_, _ = conn.Write(append(line, '\n'))
}
