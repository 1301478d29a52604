package plugin

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"lockstep.dev/lockstep/agent/api"
)

var hostIf = api.HostIfName(testContainer, "eth0")

// parseResult reads the plugin's stdout as a result of cniVersion and
// converts it to 1.1.0 for inspection.
func parseResult(t *testing.T, out []byte, cniVersion string) *types100.Result {
	t.Helper()
	var head struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(out, &head); err != nil || head.CNIVersion != cniVersion {
		t.Fatalf("result cniVersion = %q (%v), want %q:\n%s", head.CNIVersion, err, cniVersion, out)
	}
	res, err := version.NewResult(cniVersion, out)
	if err != nil {
		t.Fatalf("parse %s result: %v\n%s", cniVersion, err, out)
	}
	current, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatalf("convert result: %v", err)
	}
	return current
}

func TestAddResult(t *testing.T) {
	for _, cniVersion := range []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1"} {
		t.Run(cniVersion, func(t *testing.T) {
			h := newHarness(t)
			h.grant("10.244.0.5/24", "fd00:10:244::5/64")
			stdin := h.conf(cniVersion, `,"dns":{"nameservers":["10.96.0.10"],"search":["default.svc.cluster.local"]}`)

			if err := h.plugin.add(t.Context(), h.cmdArgs(stdin)); err != nil {
				t.Fatalf("add() error = %v", err)
			}
			if got, want := h.events.list(), []string{"agent cni-add"}; !slices.Equal(got, want) {
				t.Fatalf("steps = %q, want one round trip %q", got, want)
			}
			wantAdd := api.CNIAddRequest{
				Attachment: api.Attachment{ContainerID: testContainer, IfName: "eth0"},
				Netns:      testNetns,
				Pod:        api.PodRef{Namespace: "default", Name: "web-0", UID: "1e9f2a"},
				MTU:        1450,
			}
			if h.agent.lastAdd != wantAdd {
				t.Fatalf("agent got ADD %+v, want %+v", h.agent.lastAdd, wantAdd)
			}
			if h.agent.netnsRead != h.netnsMarker {
				t.Fatalf("agent read %q from the passed namespace, want %q", h.agent.netnsRead, h.netnsMarker)
			}

			res := parseResult(t, h.stdout.Bytes(), cniVersion)
			if len(res.Interfaces) != 2 {
				t.Fatalf("interfaces = %v, want host and pod", res.Interfaces)
			}
			host, pod := res.Interfaces[0], res.Interfaces[1]
			if host.Name != hostIf || host.Mac != "ee:ee:ee:ee:ee:ee" || host.Sandbox != "" {
				t.Fatalf("host interface = %+v", host)
			}
			if pod.Name != "eth0" || pod.Mac != podMAC.String() || pod.Sandbox != testNetns {
				t.Fatalf("pod interface = %+v", pod)
			}
			wantIPs := []string{"10.244.0.5/32 via 169.254.1.1 on 1", "fd00:10:244::5/128 via fe80::1 on 1"}
			var gotIPs []string
			for _, ip := range res.IPs {
				iface := -1
				if ip.Interface != nil {
					iface = *ip.Interface
				}
				gotIPs = append(gotIPs, fmt.Sprintf("%s via %s on %d", ip.Address.String(), ip.Gateway, iface))
			}
			if !slices.Equal(gotIPs, wantIPs) {
				t.Fatalf("ips = %q, want %q", gotIPs, wantIPs)
			}
			var gotRoutes []string
			for _, r := range res.Routes {
				gotRoutes = append(gotRoutes, fmt.Sprintf("%s via %s", r.Dst.String(), r.GW))
			}
			if want := []string{"0.0.0.0/0 via 169.254.1.1", "::/0 via fe80::1"}; !slices.Equal(gotRoutes, want) {
				t.Fatalf("routes = %q, want %q", gotRoutes, want)
			}
			if !slices.Equal(res.DNS.Nameservers, []string{"10.96.0.10"}) || len(res.DNS.Search) != 1 {
				t.Fatalf("dns = %+v, want the config's", res.DNS)
			}
		})
	}
}

// TestAddChainedKeepsPrevResult: lockstep after another plugin appends its
// interfaces and addresses, and the previous plugin's stay where they were.
func TestAddChainedKeepsPrevResult(t *testing.T) {
	for _, cniVersion := range []string{"1.1.0", "0.4.0"} {
		t.Run(cniVersion, func(t *testing.T) {
			h := newHarness(t)
			h.grant("10.244.0.5/24")
			ipVersion := ""
			if cniVersion == "0.4.0" {
				ipVersion = `"version":"4",`
			}
			prev := fmt.Sprintf(`,"prevResult":{"cniVersion":%q,
				"interfaces":[{"name":"macvlan0","sandbox":%q}],
				"ips":[{%s"address":"192.168.7.2/24","gateway":"192.168.7.1","interface":0}],
				"routes":[{"dst":"192.168.0.0/16"}],
				"dns":{"nameservers":["192.168.7.53"]}}`, cniVersion, testNetns, ipVersion)
			if err := h.plugin.add(t.Context(), h.cmdArgs(h.conf(cniVersion, prev))); err != nil {
				t.Fatalf("add() error = %v", err)
			}
			res := parseResult(t, h.stdout.Bytes(), cniVersion)
			var names []string
			for _, iface := range res.Interfaces {
				names = append(names, iface.Name)
			}
			if want := []string{"macvlan0", hostIf, "eth0"}; !slices.Equal(names, want) {
				t.Fatalf("interfaces = %q, want %q", names, want)
			}
			if len(res.IPs) != 2 || *res.IPs[0].Interface != 0 || res.IPs[0].Address.String() != "192.168.7.2/24" {
				t.Fatalf("previous plugin's address moved or vanished: %v", res.IPs)
			}
			if *res.IPs[1].Interface != 2 || res.IPs[1].Address.String() != "10.244.0.5/32" {
				t.Fatalf("lockstep address = %v, want 10.244.0.5/32 on interface 2", res.IPs[1])
			}
			if len(res.Routes) != 2 || res.Routes[0].Dst.String() != "192.168.0.0/16" {
				t.Fatalf("routes = %v, want the previous route then the default", res.Routes)
			}
			if !slices.Equal(res.DNS.Nameservers, []string{"192.168.7.53"}) {
				t.Fatalf("dns = %+v, want the previous plugin's when the config has none", res.DNS)
			}
		})
	}
}

// TestAddUndoesWhatTheRuntimeCannotSee: when the result cannot be written,
// the runtime never learns the pod is connected, so the plugin asks the
// agent to disconnect it before it reports the failure.
func TestAddUndoesWhatTheRuntimeCannotSee(t *testing.T) {
	h := newHarness(t)
	h.grant("10.244.0.5/24")
	h.plugin.stdout = failingWriter{}
	err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
	wantCode(t, err, types.ErrIOFailure, "disconnected again")
	if got, want := h.events.list(), []string{"agent cni-add", "agent cni-del"}; !slices.Equal(got, want) {
		t.Fatalf("steps = %q, want %q", got, want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

func TestAddRejectsBeforeConnecting(t *testing.T) {
	tests := []struct {
		name     string
		stdin    func(*harness) []byte
		cniArgs  string
		netns    string // testNetns unless set
		wantCode uint
		wantMsg  string
	}{
		{
			name:     "netns gone",
			stdin:    func(h *harness) []byte { return h.conf("1.1.0", "") },
			cniArgs:  testArgs,
			netns:    "/run/netns/gone",
			wantCode: types.ErrInvalidNetNS,
			wantMsg:  "open CNI_NETNS /run/netns/gone",
		},
		{
			name: "unreadable prevResult",
			stdin: func(h *harness) []byte {
				return h.conf("1.1.0", `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"not-an-ip"}]}`)
			},
			cniArgs:  testArgs,
			wantCode: types.ErrInvalidNetworkConfig,
			wantMsg:  "",
		},
		{
			name:     "bad CNI_ARGS",
			stdin:    func(h *harness) []byte { return h.conf("1.1.0", "") },
			cniArgs:  "K8S_POD_NAMESPACE=Not_A_Label",
			wantCode: types.ErrInvalidEnvironmentVariables,
			wantMsg:  "K8S_POD_NAMESPACE",
		},
		{
			name:     "malformed config",
			stdin:    func(*harness) []byte { return []byte(`{"cniVersion":"1.1.0","name":"pods"`) },
			cniArgs:  testArgs,
			wantCode: types.ErrInvalidNetworkConfig,
			wantMsg:  "invalid network config",
		},
		{
			name: "mtu out of range",
			stdin: func(h *harness) []byte {
				return []byte(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","mtu":70000}`)
			},
			cniArgs:  testArgs,
			wantCode: types.ErrInvalidNetworkConfig,
			wantMsg:  `"mtu" 70000 out of range 68..65535`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			args := h.cmdArgs(tt.stdin(h))
			args.Args = tt.cniArgs
			if tt.netns != "" {
				args.Netns = tt.netns
			}
			wantCode(t, h.plugin.add(t.Context(), args), tt.wantCode, tt.wantMsg)
			if got := h.events.list(); len(got) != 0 {
				t.Fatalf("steps = %q, want none", got)
			}
		})
	}
}

func TestAddPassesAgentErrorsThrough(t *testing.T) {
	tests := []struct {
		name string
		err  *api.Error
		code uint
		msg  string
	}{
		{"pool exhausted", api.Errorf(api.CodePoolExhausted, "pool default (10.244.0.0/24) has no free address"), api.CodePoolExhausted, "no free address"},
		{"DEL won", api.Errorf(api.CodeCancelled, "ADD of %s/eth0 was cancelled", testContainer), api.CodeCancelled, "was cancelled"},
		{"wiring failed", &api.Error{Code: api.CodeIOFailure, Msg: "wire pod network: permission denied", Details: "the address reservation was rolled back"}, types.ErrIOFailure, "rolled back"},
		{"not a netns", &api.Error{Code: api.CodeInvalidNetNS, Msg: "lockstep agent refuses the namespace passed with cni-add: it is not a namespace handle (nsfs)"}, types.ErrInvalidNetNS, "not a namespace handle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.agent.addErr = tt.err
			err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
			cniErr := wantCode(t, err, tt.code, tt.msg)
			if cniErr.Details == "" {
				t.Fatalf("error %v carries no hint", cniErr)
			}
			if got := h.events.list(); !slices.Equal(got, []string{"agent cni-add"}) {
				t.Fatalf("steps = %q, want only the one call", got)
			}
			if h.stdout.Len() != 0 {
				t.Fatalf("a failed ADD printed a result: %s", h.stdout.String())
			}
		})
	}
}

// TestAddOlderAgent: an agent from before the one-trip ADD knows no
// cni-add; the runtime gets code 11 and the fix.
func TestAddOlderAgent(t *testing.T) {
	h := newHarness(t)
	old := oldAgent(t)
	err := h.plugin.add(t.Context(), h.cmdArgs([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":%q}`, old))))
	cniErr := wantCode(t, err, types.ErrTryAgainLater, `no operation "cni-add"`)
	if !strings.Contains(cniErr.Details, "upgrade the agent and the plugin together") {
		t.Fatalf("details = %q, want the fix", cniErr.Details)
	}
}

// oldAgent listens on a socket and answers every request as an agent that
// predates the cni-* operations does, reading any descriptor away.
func oldAgent(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsold")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					var req api.Request
					_ = json.Unmarshal(line, &req)
					resp, _ := json.Marshal(api.Response{Error: api.Errorf(api.CodeIncompatibleVersion, "lockstep agent has no operation %q in API v1", req.Op)})
					_, _ = conn.Write(append(resp, '\n'))
				}
			}()
		}
	}()
	return sock
}

// TestAddAgentUnreachable: with no agent listening, ADD fails with code 11
// (the runtime retries) within the client's bound instead of hanging.
func TestAddAgentUnreachable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":%q}`, h.socket+".absent"))
	start := time.Now()
	err := h.plugin.add(t.Context(), h.cmdArgs(stdin))
	took := time.Since(start)
	wantCode(t, err, types.ErrTryAgainLater, "lockstep agent unreachable at "+h.socket+".absent")
	if took > api.PluginTimeout+time.Second {
		t.Fatalf("ADD took %s against an absent agent, want about %s", took, api.PluginTimeout)
	}
	if got := h.events.list(); len(got) != 0 {
		t.Fatalf("steps = %q, want none", got)
	}
}
