package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
// the plugin's real api.Client is exercised end to end, the namespace
// passed as a descriptor included.
type fakeAgent struct {
	events *events

	mu         sync.Mutex
	addResp    api.CNIAddResponse
	addErr     *api.Error
	delResp    api.DelResponse
	delErr     *api.Error
	checkResp  api.CNICheckResponse
	checkErr   *api.Error
	gcResp     api.GCResponse
	gcErr      *api.Error
	statusResp api.StatusResponse
	statusErr  *api.Error

	lastAdd   api.CNIAddRequest
	lastCheck api.CNICheckRequest
	lastGC    api.GCRequest
	// netnsRead is what the agent read from the descriptor it was passed
	// last; "" when it was passed none.
	netnsRead string
}

func (a *fakeAgent) serve(t *testing.T, socket string) {
	ln, err := server.ListenSocket(socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", socket, err)
	}
	srv := server.NewAPIServer(a, slog.New(slog.DiscardHandler), nil)
	// The tests pass a plain file for the namespace, which they can
	// create without privileges.
	srv.SetNetnsCheck(func(f *os.File) error {
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("not the test's namespace file (%v)", err)
		}
		return nil
	})
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

// readNetns records what the passed descriptor holds.
func (a *fakeAgent) readNetns(f *os.File) {
	a.netnsRead = ""
	if f == nil {
		return
	}
	b, err := io.ReadAll(f)
	if err != nil {
		a.netnsRead = "unreadable: " + err.Error()
		return
	}
	a.netnsRead = string(b)
}

func (a *fakeAgent) CNIAdd(_ context.Context, req api.CNIAddRequest, netns *os.File) (*api.CNIAddResponse, error) {
	defer a.record(api.OpCNIAdd)()
	a.lastAdd = req
	a.readNetns(netns)
	resp := a.addResp
	return &resp, noErr(a.addErr)
}

func (a *fakeAgent) CNIDel(context.Context, api.Attachment) (*api.DelResponse, error) {
	defer a.record(api.OpCNIDel)()
	resp := a.delResp
	return &resp, noErr(a.delErr)
}

func (a *fakeAgent) CNICheck(_ context.Context, req api.CNICheckRequest, netns *os.File) (*api.CNICheckResponse, error) {
	defer a.record(api.OpCNICheck)()
	a.lastCheck = req
	a.readNetns(netns)
	resp := a.checkResp
	return &resp, noErr(a.checkErr)
}

// The reservation steps alone are not the plugin's any more.
func (a *fakeAgent) Add(context.Context, api.AddRequest) (*api.AddResponse, error) {
	defer a.record(api.OpAdd)()
	return nil, api.Errorf(api.CodeInternal, "the plugin connects pods through cni-add")
}

func (a *fakeAgent) Confirm(context.Context, api.OpRequest) error {
	defer a.record(api.OpConfirm)()
	return api.Errorf(api.CodeInternal, "the plugin connects pods through cni-add")
}

func (a *fakeAgent) Abort(context.Context, api.OpRequest) error {
	defer a.record(api.OpAbort)()
	return api.Errorf(api.CodeInternal, "the plugin connects pods through cni-add")
}

func (a *fakeAgent) Del(context.Context, api.Attachment) (*api.DelResponse, error) {
	defer a.record(api.OpDel)()
	return &api.DelResponse{}, nil
}

func (a *fakeAgent) Get(context.Context, api.Attachment) (*api.Endpoint, error) {
	defer a.record(api.OpGet)()
	return nil, api.Errorf(api.CodeUnknownContainer, "the plugin reads endpoints through cni-check")
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

var podMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x05}

// fakeNet stands in for the host links GC sweeps: it records calls and
// remembers which links exist.
type fakeNet struct {
	events *events

	mu          sync.Mutex
	links       map[string]bool
	teardownErr map[string]error
	listErr     error
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
	// netnsMarker is what the file standing in for testNetns holds.
	netnsMarker string
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
	// A plain file stands in for the pod's namespace; the fake agent
	// reads it back to show the descriptor arrived.
	h.netnsMarker = "netns of " + t.Name()
	nsFile := filepath.Join(dir, "netns")
	if err := os.WriteFile(nsFile, []byte(h.netnsMarker), 0o600); err != nil {
		t.Fatal(err)
	}
	h.plugin = &plugin{
		agent: func(socket string) agentClient { return api.NewClient(socket, 0) },
		openNetns: func(path string) (*os.File, error) {
			if path != testNetns {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return os.Open(nsFile)
		},
		teardown:  h.net.teardown,
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

// grant makes the fake agent answer ADD with the given addresses wired,
// as podnet does.
func (h *harness) grant(addrs ...string) {
	h.agent.addResp = api.CNIAddResponse{
		HostIf: api.Interface{Name: api.HostIfName(testContainer, "eth0"), MAC: "ee:ee:ee:ee:ee:ee"},
		PodIf:  api.Interface{Name: "eth0", MAC: podMAC.String()},
	}
	var v4, v6 bool
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		h.agent.addResp.Addresses = append(h.agent.addResp.Addresses, api.Address{Pool: "default", Address: p})
		gw := netip.MustParseAddr("169.254.1.1")
		if p.Addr().Is6() {
			gw, v6 = netip.MustParseAddr("fe80::1"), true
		} else {
			v4 = true
		}
		h.agent.addResp.IPs = append(h.agent.addResp.IPs, api.IPConfig{Address: netip.PrefixFrom(p.Addr(), p.Addr().BitLen()), Gateway: gw})
	}
	if v4 {
		h.agent.addResp.Routes = append(h.agent.addResp.Routes, api.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("169.254.1.1")})
	}
	if v6 {
		h.agent.addResp.Routes = append(h.agent.addResp.Routes, api.Route{Dst: netip.MustParsePrefix("::/0"), GW: netip.MustParseAddr("fe80::1")})
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
