package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/netsetup"
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
			if got, want := h.events.list(), []string{"agent add", "setup " + hostIf, "agent confirm"}; !slices.Equal(got, want) {
				t.Fatalf("steps = %q, want %q", got, want)
			}
			wantAdd := api.AddRequest{
				Attachment: api.Attachment{ContainerID: testContainer, IfName: "eth0"},
				Netns:      testNetns,
				Pod:        api.PodRef{Namespace: "default", Name: "web-0", UID: "1e9f2a"},
			}
			if h.agent.lastAdd != wantAdd {
				t.Fatalf("agent got ADD %+v, want %+v", h.agent.lastAdd, wantAdd)
			}
			if h.agent.lastOp.OpID != 7 || h.agent.lastOp.Attachment != wantAdd.Attachment {
				t.Fatalf("agent got Confirm %+v, want op 7 for %+v", h.agent.lastOp, wantAdd.Attachment)
			}
			if s := h.net.lastSetup; s.MTU != 1450 || s.PodIf != "eth0" || s.Netns != testNetns || len(s.Addresses) != 2 {
				t.Fatalf("setup args = %+v", s)
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

// TestAddRollsBackWhenDelWins is the ADD/DEL race: a DEL arrives while the
// pod is being wired, the agent cancels the ADD at Confirm, and the plugin
// must unwire before it aborts, so the address is never free while routed.
func TestAddRollsBackWhenDelWins(t *testing.T) {
	h := newHarness(t)
	h.grant("10.244.0.5/24")
	h.agent.confirmErr = api.Errorf(api.CodeCancelled, "DEL of %s/eth0 arrived during ADD", testContainer)

	err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
	wantCode(t, err, api.CodeCancelled, "DEL of")
	want := []string{"agent add", "setup " + hostIf, "agent confirm", "teardown " + hostIf, "agent abort"}
	if got := h.events.list(); !slices.Equal(got, want) {
		t.Fatalf("steps = %q, want %q", got, want)
	}
	if h.agent.lastOp.OpID != 7 {
		t.Fatalf("abort op = %+v, want op 7", h.agent.lastOp)
	}
	if h.stdout.Len() != 0 {
		t.Fatalf("a failed ADD printed a result: %s", h.stdout.String())
	}
}

func TestAddRollsBackWhenWiringFails(t *testing.T) {
	tests := []struct {
		name     string
		setupErr error
		wantMsg  string
	}{
		{name: "kernel error", setupErr: errors.New("add address 10.244.0.5/32: permission denied"), wantMsg: "permission denied"},
		{name: "address still routed", setupErr: fmt.Errorf("add host route 10.244.0.5/32 dev %s: %w", hostIf, netsetup.ErrRouteTaken), wantMsg: "ip route get"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.grant("10.244.0.5/24")
			h.net.setupErr = tt.setupErr
			err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
			cniErr := wantCode(t, err, types.ErrIOFailure, tt.wantMsg)
			t.Logf("ADD reports: %v", cniErr)
			want := []string{"agent add", "setup " + hostIf, "teardown " + hostIf, "agent abort"}
			if got := h.events.list(); !slices.Equal(got, want) {
				t.Fatalf("steps = %q, want %q", got, want)
			}
		})
	}
}

func TestAddRollbackReportsWhatItCouldNotUndo(t *testing.T) {
	h := newHarness(t)
	h.grant("10.244.0.5/24")
	h.agent.confirmErr = api.Errorf(api.CodeInternal, "write state: disk full")
	h.net.teardownErr[hostIf] = errors.New("delete host interface: device busy")
	err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
	wantCode(t, err, api.CodeInternal, "rollback could not remove the wiring")
}

func TestAddRejectsBeforeReserving(t *testing.T) {
	tests := []struct {
		name     string
		stdin    func(*harness) []byte
		cniArgs  string
		wantCode uint
		wantMsg  string
	}{
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
			wantCode(t, h.plugin.add(t.Context(), args), tt.wantCode, tt.wantMsg)
			if got := h.events.list(); len(got) != 0 {
				t.Fatalf("steps = %q, want none", got)
			}
		})
	}
}

func TestAddPassesAgentErrorsThrough(t *testing.T) {
	h := newHarness(t)
	h.agent.addErr = api.Errorf(api.CodePoolExhausted, "pool default (10.244.0.0/24) has no free address")
	err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
	cniErr := wantCode(t, err, api.CodePoolExhausted, "no free address")
	if cniErr.Details == "" {
		t.Fatalf("error %v carries no hint", cniErr)
	}
	if got := h.events.list(); !slices.Equal(got, []string{"agent add"}) {
		t.Fatalf("steps = %q, want only the reservation", got)
	}
}

func TestAddRejectsForeignHostIfName(t *testing.T) {
	h := newHarness(t)
	h.grant("10.244.0.5/24")
	h.agent.addResp.HostIfName = "cali12345"
	err := h.plugin.add(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
	wantCode(t, err, api.CodeInternal, "upgrade them together")
	if got := h.events.list(); slices.Contains(got, "setup "+hostIf) || !slices.Contains(got, "agent abort") {
		t.Fatalf("steps = %q, want an abort and no wiring", got)
	}
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
	if got := h.events.list(); slices.Contains(got, "setup "+hostIf) {
		t.Fatalf("steps = %q, want no wiring", got)
	}
}
