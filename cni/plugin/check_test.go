package plugin

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

// addedPrevResult is what ADD printed for 10.244.0.5, as the runtime hands
// it back to CHECK.
func addedPrevResult(addr string) string {
	return fmt.Sprintf(`,"prevResult":{"cniVersion":"1.1.0",
		"interfaces":[{"name":%q,"mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:58:0a:f4:00:05","sandbox":%q}],
		"ips":[{"address":%q,"gateway":"169.254.1.1","interface":1}],
		"routes":[{"dst":"0.0.0.0/0","gw":"169.254.1.1"}]}`, hostIf, testNetns, addr)
}

func endpoint() api.Endpoint {
	return api.Endpoint{
		Attachment: api.Attachment{ContainerID: testContainer, IfName: "eth0"},
		Netns:      testNetns,
		HostIfName: hostIf,
		Addresses:  []api.Address{{Pool: "default", Address: netip.MustParsePrefix("10.244.0.5/24")}},
		State:      "ready",
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		extra    string
		runtime  string // CNI_NETNS; testNetns unless set
		checkErr *api.Error
		diffs    []string // the agent's
		recorded string   // endpoint's recorded netns; testNetns unless set
		wantCode uint     // 0: success
		wantMsg  string
	}{
		{name: "consistent", extra: addedPrevResult("10.244.0.5/32")},
		{name: "consistent without prevResult"},
		{
			name:     "unknown to the agent",
			checkErr: api.Errorf(api.CodeUnknownContainer, "no endpoint for %s/eth0", testContainer),
			wantCode: types.ErrUnknownContainer,
			wantMsg:  "no endpoint",
		},
		{
			name:     "kernel differs",
			diffs:    []string{"pod interface eth0 in pod netns lacks address 10.244.0.5/32"},
			wantCode: api.CodeCheckFailed,
			wantMsg:  "lacks address 10.244.0.5/32",
		},
		{
			name:     "kernel unreadable",
			checkErr: &api.Error{Code: api.CodeIOFailure, Msg: "read pod network: netlink socket closed"},
			wantCode: types.ErrIOFailure,
			wantMsg:  "netlink socket closed",
		},
		{
			name:     "prevResult lacks the address",
			extra:    addedPrevResult("10.244.0.99/32"),
			wantCode: api.CodeCheckFailed,
			wantMsg:  "prevResult lacks address 10.244.0.5 on interface eth0",
		},
		{
			name:     "agent recorded another netns",
			recorded: "/run/netns/other",
			wantCode: api.CodeCheckFailed,
			wantMsg:  "agent recorded netns /run/netns/other",
		},
		{
			// The plugin passes no namespace; the agent reports it.
			name:     "netns gone",
			runtime:  "/run/netns/gone",
			recorded: "/run/netns/gone",
			diffs:    []string{"pod netns does not exist"},
			wantCode: api.CodeCheckFailed,
			wantMsg:  "does not exist",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ep := endpoint()
			if tt.recorded != "" {
				ep.Netns = tt.recorded
			}
			h.agent.checkResp = api.CNICheckResponse{Endpoint: ep, Diffs: tt.diffs}
			h.agent.checkErr = tt.checkErr
			args := h.cmdArgs(h.conf("1.1.0", tt.extra))
			if tt.runtime != "" {
				args.Netns = tt.runtime
			}
			err := h.plugin.checkCmd(t.Context(), args)
			wantRead := h.netnsMarker
			if tt.runtime != "" {
				wantRead = ""
			}
			if h.agent.netnsRead != wantRead {
				t.Fatalf("agent read %q from the passed namespace, want %q", h.agent.netnsRead, wantRead)
			}
			if h.agent.lastCheck.Netns != args.Netns || h.agent.lastCheck.Attachment != ep.Attachment {
				t.Fatalf("agent got CHECK %+v, want %s in %s", h.agent.lastCheck, ep.Attachment, args.Netns)
			}
			if tt.wantCode != 0 {
				wantCode(t, err, tt.wantCode, tt.wantMsg)
				return
			}
			if err != nil {
				t.Fatalf("checkCmd() error = %v", err)
			}
		})
	}
}
