package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/run/lockstep/lockstep.sock"

// DefaultTimeout bounds every client call, connection attempts included, of
// clients that ask for no other (lockstep status). Past it the call fails
// with CodeTryAgainLater.
const DefaultTimeout = 2 * time.Second

// PluginTimeout bounds the plugin's calls. A plugin must never hang on a
// stuck agent, and it must outwait the agent's own deadline (the server's
// RequestTimeout, answered a fifth of it later at the latest: 6 s): a
// plugin that gave up first would report an ADD failed that the agent
// then completes, and the runtime's DEL, sent at once, would find nothing
// to undo yet.
const PluginTimeout = 8 * time.Second

// MaxLine bounds one request or response line.
const MaxLine = 4 << 20

// redialInterval is how often the client retries connecting while the agent
// socket is missing or refuses connections, e.g. while the agent restarts.
const redialInterval = 25 * time.Millisecond

// Client calls the agent over its unix socket, keeping one connection open
// between calls. It is safe for concurrent use; calls take turns.
type Client struct {
	socket  string
	timeout time.Duration

	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
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
	return &Client{socket: socket, timeout: timeout}
}

// Socket returns the path of the agent socket this client calls.
func (c *Client) Socket() string { return c.socket }

// Close closes the connection, if one is open.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Client) closeLocked() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.r = nil, nil
	return err
}

// dial connects to the agent, retrying while the socket is absent or
// refuses connections (agent restarting) until ctx expires.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
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

// CNIAdd connects an attachment in one call: the agent reserves its
// addresses, wires the veth into netns (an open handle on CNI_NETNS,
// passed as a descriptor), attaches the endpoint and puts its policy in
// force before it answers. On any failure it has undone all of it.
func (c *Client) CNIAdd(ctx context.Context, req CNIAddRequest, netns *os.File) (*CNIAddResponse, error) {
	var resp CNIAddResponse
	return &resp, c.callWith(ctx, OpCNIAdd, req, &resp, netns)
}

// Add reserves addresses for an attachment and wires nothing (OpAdd).
func (c *Client) Add(ctx context.Context, req AddRequest) (*AddResponse, error) {
	var resp AddResponse
	return &resp, c.call(ctx, OpAdd, req, &resp)
}

// Confirm marks the ADD identified by req.OpID as wired. It fails with
// CodeCancelled when a DEL for the attachment won the race.
func (c *Client) Confirm(ctx context.Context, req OpRequest) error {
	return c.call(ctx, OpConfirm, req, nil)
}

// Abort rolls back a Pending ADD and frees its addresses. Aborting an ADD the
// agent no longer knows is not an error.
func (c *Client) Abort(ctx context.Context, req OpRequest) error {
	return c.call(ctx, OpAbort, req, nil)
}

// CNIDel disconnects an attachment: the agent deletes its host link,
// releases its addresses, and deletes the link again if an ADD still in
// flight wired it meanwhile. It succeeds when there is nothing to undo.
func (c *Client) CNIDel(ctx context.Context, att Attachment) (*DelResponse, error) {
	var resp DelResponse
	return &resp, c.call(ctx, OpCNIDel, att, &resp)
}

// CNICheck compares an attachment's wiring with the agent's record,
// inspecting the pod through netns; a nil netns says the runtime's
// namespace is gone.
func (c *Client) CNICheck(ctx context.Context, req CNICheckRequest, netns *os.File) (*CNICheckResponse, error) {
	var resp CNICheckResponse
	return &resp, c.callWith(ctx, OpCNICheck, req, &resp, netns)
}

// Del releases an attachment's addresses and record, and nothing else: the
// caller must have removed its wiring. It succeeds when the agent has no
// record.
func (c *Client) Del(ctx context.Context, att Attachment) (*DelResponse, error) {
	var resp DelResponse
	return &resp, c.call(ctx, OpDel, att, &resp)
}

// Get returns the committed endpoint of an attachment, or an error with
// CodeUnknownContainer when there is none.
func (c *Client) Get(ctx context.Context, att Attachment) (*Endpoint, error) {
	var resp Endpoint
	return &resp, c.call(ctx, OpGet, att, &resp)
}

// GC releases every attachment not listed in req.Valid.
func (c *Client) GC(ctx context.Context, req GCRequest) (*GCResponse, error) {
	var resp GCResponse
	return &resp, c.call(ctx, OpGC, req, &resp)
}

// Status returns pool usage.
func (c *Client) Status(ctx context.Context) (*StatusResponse, error) {
	var resp StatusResponse
	return &resp, c.call(ctx, OpStatus, nil, &resp)
}

// call sends one request and reads its response. Any failure to talk to
// the agent closes the connection (the next call dials again) and is
// reported as CodeTryAgainLater; the request is never resent, since the
// agent may already have acted on it.
func (c *Client) call(ctx context.Context, op string, in, out any) error {
	return c.callWith(ctx, op, in, out, nil)
}

// callWith is call with file, when not nil, passed to the agent as a
// descriptor with the request (SCM_RIGHTS). The caller keeps it open
// until callWith returns; the agent has its own copy from then on.
func (c *Client) callWith(ctx context.Context, op string, in, out any, file *os.File) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req := Request{Version: Version, Op: op}
	if in != nil {
		body, err := json.Marshal(in)
		if err != nil {
			return Errorf(CodeInternal, "encode %s request: %v", op, err)
		}
		req.Body = body
	}
	line, err := json.Marshal(req)
	if err != nil {
		return Errorf(CodeInternal, "encode %s request: %v", op, err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		conn, err := c.dial(ctx)
		if err != nil {
			return c.unreachable(err)
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
	}
	conn := c.conn
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// A cancelled ctx interrupts blocked I/O at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := writeRequest(conn, append(line, '\n'), file); err != nil {
		c.closeLocked()
		return c.unreachable(err)
	}
	raw, err := ReadLine(c.r, MaxLine)
	if err != nil {
		c.closeLocked()
		return c.unreachable(err)
	}
	var resp Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		c.closeLocked()
		return Errorf(CodeInternal, "decode agent's %s response: %v", op, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return Errorf(CodeInternal, "decode agent's %s response: %v", op, err)
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

// ErrLineTooLong reports a request or response line longer than allowed.
var ErrLineTooLong = errors.New("line too long")

// ReadLine reads one '\n'-terminated line of at most max bytes and returns
// it without the newline. Both sides of the protocol use it.
func ReadLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, ErrLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}
