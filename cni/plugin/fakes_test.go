package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/cni/netsetup"
)

// events records, in order, what the fake agent and the fake kernel were
// asked to do, so tests can assert on the order of steps.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// fakeAgent serves the agent API on a unix socket with canned answers, so
// the plugin's real api.Client is exercised end to end.
type fakeAgent struct {
	events *events

	mu         sync.Mutex
	addResp    api.AddResponse
	addErr     *api.Error
	confirmErr *api.Error
	delResp    api.DelResponse
	delErr     *api.Error
	getResp    api.Endpoint
	getErr     *api.Error
	gcResp     api.GCResponse
	gcErr      *api.Error
	statusResp api.StatusResponse
	statusErr  *api.Error

	lastAdd api.AddRequest
	lastOp  api.OpRequest
	lastGC  api.GCRequest
}

func (a *fakeAgent) serve(t *testing.T, socket string) {
	ln, err := server.ListenSocket(socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", socket, err)
	}
	srv := server.NewAPIServer(a, slog.New(slog.DiscardHandler), nil)
	go srv.Serve(ln)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
}

// The fake agent implements server.Backend, so the real protocol runs
// between the plugin's client and the real API server.

func (a *fakeAgent) record(op string) func() {
	a.mu.Lock()
	a.events.add("agent %s", op)
	return a.mu.Unlock
}

// noErr turns a nil *api.Error into a nil error.
func noErr(e *api.Error) error {
	if e == nil {
		return nil
	}
	return e
}

func (a *fakeAgent) Add(_ context.Context, req api.AddRequest) (*api.AddResponse, error) {
	defer a.record(api.OpAdd)()
	a.lastAdd = req
	resp := a.addResp
	return &resp, noErr(a.addErr)
}

func (a *fakeAgent) Confirm(_ context.Context, req api.OpRequest) error {
	defer a.record(api.OpConfirm)()
	a.lastOp = req
	return noErr(a.confirmErr)
}

func (a *fakeAgent) Abort(_ context.Context, req api.OpRequest) error {
	defer a.record(api.OpAbort)()
	a.lastOp = req
	return nil
}

func (a *fakeAgent) Del(context.Context, api.Attachment) (*api.DelResponse, error) {
	defer a.record(api.OpDel)()
	resp := a.delResp
	return &resp, noErr(a.delErr)
}

func (a *fakeAgent) Get(context.Context, api.Attachment) (*api.Endpoint, error) {
	defer a.record(api.OpGet)()
	resp := a.getResp
	return &resp, noErr(a.getErr)
}

func (a *fakeAgent) GC(_ context.Context, req api.GCRequest) (*api.GCResponse, error) {
	defer a.record(api.OpGC)()
	a.lastGC = req
	resp := a.gcResp
	return &resp, noErr(a.gcErr)
}

func (a *fakeAgent) Status(context.Context) (*api.StatusResponse, error) {
	defer a.record(api.OpStatus)()
	resp := a.statusResp
	return &resp, noErr(a.statusErr)
}

// fakeNet stands in for netsetup: it records calls and remembers which host
// links exist.
type fakeNet struct {
	events *events

	mu          sync.Mutex
	links       map[string]bool
	setupErr    error
	teardownErr map[string]error
	checkErr    error
	listErr     error
	lastSetup   netsetup.SetupArgs
	lastCheck   netsetup.CheckArgs
}

var podMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x05}

func (n *fakeNet) setup(_ context.Context, args netsetup.SetupArgs) (*netsetup.Wired, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events.add("setup %s", args.HostIf)
	n.lastSetup = args
	if n.setupErr != nil {
		return nil, n.setupErr
	}
	n.links[args.HostIf] = true
	wired := &netsetup.Wired{
		Host:  netsetup.Link{Name: args.HostIf, MAC: netsetup.HostMAC, Index: 42},
		Pod:   netsetup.Link{Name: args.PodIf, MAC: podMAC, Index: 2},
		Netns: args.Netns,
	}
	for _, p := range args.Addresses {
		wired.Addresses = append(wired.Addresses, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
	}
	return wired, nil
}

func (n *fakeNet) teardown(hostIf string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events.add("teardown %s", hostIf)
	if err := n.teardownErr[hostIf]; err != nil {
		return err
	}
	delete(n.links, hostIf)
	return nil
}

func (n *fakeNet) check(_ context.Context, args netsetup.CheckArgs) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events.add("check %s", args.HostIf)
	n.lastCheck = args
	return n.checkErr
}

func (n *fakeNet) hostLinks() ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listErr != nil {
		return nil, n.listErr
	}
	var names []string
	for name := range n.links {
		names = append(names, name)
	}
	return names, nil
}

// harness is one plugin wired to a fake agent and a fake kernel.
type harness struct {
	t      *testing.T
	socket string
	events *events
	agent  *fakeAgent
	net    *fakeNet
	stdout bytes.Buffer
	stderr bytes.Buffer
	plugin *plugin
}

const (
	testContainer = "f00dcafe0123"
	testNetns     = "/run/netns/pod-1"
	testArgs      = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=1e9f2a"
)

func newHarness(t *testing.T) *harness {
	t.Helper()
	// t.TempDir paths can exceed the 107 bytes a socket path may hold.
	dir, err := os.MkdirTemp("", "lsplugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ev := &events{}
	h := &harness{
		t:      t,
		socket: filepath.Join(dir, "agent.sock"),
		events: ev,
		agent:  &fakeAgent{events: ev},
		net:    &fakeNet{events: ev, links: map[string]bool{}, teardownErr: map[string]error{}},
	}
	h.agent.serve(t, h.socket)
	h.plugin = &plugin{
		agent:     func(socket string) agentClient { return api.NewClient(socket, 0) },
		setup:     h.net.setup,
		teardown:  h.net.teardown,
		check:     h.net.check,
		hostLinks: h.net.hostLinks,
		stdout:    &h.stdout,
		stderr:    &h.stderr,
	}
	return h
}

// conf returns a network config for the fake agent's socket; extra is
// spliced in as more top-level keys.
func (h *harness) conf(cniVersion, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"pods","type":"lockstep","socket":%q,"mtu":1450%s}`, cniVersion, h.socket, extra))
}

func (h *harness) cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{
		ContainerID: testContainer,
		Netns:       testNetns,
		IfName:      "eth0",
		Args:        testArgs,
		Path:        "/opt/cni/bin",
		StdinData:   stdin,
	}
}

// grant makes the fake agent answer ADD with the given addresses.
func (h *harness) grant(addrs ...string) {
	h.agent.addResp = api.AddResponse{OpID: 7, HostIfName: api.HostIfName(testContainer, "eth0")}
	for _, a := range addrs {
		h.agent.addResp.Addresses = append(h.agent.addResp.Addresses, api.Address{Pool: "default", Address: netip.MustParsePrefix(a)})
	}
}

// wantCode asserts err is a *types.Error with the given code and a message
// containing msg.
func wantCode(t *testing.T, err error, code uint, msg string) *types.Error {
	t.Helper()
	var cniErr *types.Error
	if !errors.As(err, &cniErr) {
		t.Fatalf("error = %#v, want *types.Error with code %d", err, code)
	}
	if cniErr.Code != code {
		t.Fatalf("error code = %d (%v), want %d", cniErr.Code, cniErr, code)
	}
	if !strings.Contains(cniErr.Error(), msg) {
		t.Fatalf("error %q does not mention %q", cniErr.Error(), msg)
	}
	return cniErr
}
