package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/run/lockstep/lockstep.sock"

// DefaultTimeout bounds every client call, connection attempts included. A
// plugin must never hang on a stuck agent: past this the call fails with
// CodeTryAgainLater.
const DefaultTimeout = 2 * time.Second

// redialInterval is how often the client retries connecting while the agent
// socket is missing or refuses, e.g. while the agent restarts.
const redialInterval = 25 * time.Millisecond

// Client calls the agent over its unix socket. The zero value is not usable;
// build one with NewClient.
type Client struct {
	socket  string
	timeout time.Duration
	http    *http.Client
}

// NewClient returns a client for the agent listening on socket. A zero
// timeout means DefaultTimeout.
func NewClient(socket string, timeout time.Duration) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Client{socket: socket, timeout: timeout}
	c.http = &http.Client{Transport: &http.Transport{
		DialContext:       c.dial,
		DisableKeepAlives: true,
	}}
	return c
}

// Socket returns the path of the agent socket this client calls.
func (c *Client) Socket() string { return c.socket }

// dial connects to the agent, retrying while the socket is absent or
// refuses connections (agent restarting) until ctx expires.
func (c *Client) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", c.socket)
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(redialInterval):
		}
	}
}

// Add reserves addresses for an attachment.
func (c *Client) Add(ctx context.Context, req AddRequest) (*AddResponse, error) {
	var resp AddResponse
	return &resp, c.call(ctx, http.MethodPost, PathAdd, req, &resp)
}

// Confirm marks the ADD identified by req.OpID as wired. It fails with
// CodeCancelled when a DEL for the attachment won the race.
func (c *Client) Confirm(ctx context.Context, req OpRequest) error {
	return c.call(ctx, http.MethodPost, PathConfirm, req, nil)
}

// Abort rolls back a Pending ADD and frees its addresses. Aborting an ADD the
// agent no longer knows is not an error.
func (c *Client) Abort(ctx context.Context, req OpRequest) error {
	return c.call(ctx, http.MethodPost, PathAbort, req, nil)
}

// Del releases an attachment. It succeeds when the agent has no record.
func (c *Client) Del(ctx context.Context, att Attachment) (*DelResponse, error) {
	var resp DelResponse
	return &resp, c.call(ctx, http.MethodPost, PathDel, att, &resp)
}

// Get returns the committed endpoint of an attachment, or an error with
// CodeUnknownContainer when there is none.
func (c *Client) Get(ctx context.Context, att Attachment) (*Endpoint, error) {
	var resp Endpoint
	return &resp, c.call(ctx, http.MethodPost, PathGet, att, &resp)
}

// GC releases every attachment not listed in req.Valid.
func (c *Client) GC(ctx context.Context, req GCRequest) (*GCResponse, error) {
	var resp GCResponse
	return &resp, c.call(ctx, http.MethodPost, PathGC, req, &resp)
}

// Status returns pool usage.
func (c *Client) Status(ctx context.Context) (*StatusResponse, error) {
	var resp StatusResponse
	return &resp, c.call(ctx, http.MethodGet, PathStatus, nil, &resp)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	var body io.Reader
	if in != nil {
		buf, err := json.Marshal(in)
		if err != nil {
			return Errorf(CodeInternal, "encode %s request: %v", path, err)
		}
		body = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lockstep"+path, body)
	if err != nil {
		return Errorf(CodeInternal, "build %s request: %v", path, err)
	}
	req.Header.Set(VersionHeader, Version)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	payload, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return c.unreachable(err)
	}
	if resp.StatusCode != http.StatusOK {
		apiErr := &Error{}
		if json.Unmarshal(payload, apiErr) != nil || apiErr.Code == 0 {
			return Errorf(CodeInternal, "agent answered %s with HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(payload))
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(payload, out); err != nil {
		return Errorf(CodeInternal, "decode %s response: %v", path, err)
	}
	return nil
}

func (c *Client) unreachable(err error) *Error {
	return &Error{
		Code:    CodeTryAgainLater,
		Msg:     fmt.Sprintf("lockstep agent unreachable at %s", c.socket),
		Details: fmt.Sprintf("%v; check that `lockstep agent` is running on this node and that the CNI config's \"socket\" matches its --socket", err),
	}
}
