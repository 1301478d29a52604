package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/netsetup"
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
		getErr   *api.Error
		netns    string // endpoint's recorded netns; testNetns unless set
		checkErr error
		wantCode uint // 0: success
		wantMsg  string
	}{
		{name: "consistent", extra: addedPrevResult("10.244.0.5/32")},
		{name: "consistent without prevResult"},
		{
			name:     "unknown to the agent",
			getErr:   api.Errorf(api.CodeUnknownContainer, "no endpoint for %s/eth0", testContainer),
			wantCode: types.ErrUnknownContainer,
			wantMsg:  "no endpoint",
		},
		{
			name:     "kernel differs",
			checkErr: &netsetup.MismatchError{Diffs: []string{"pod interface eth0 in " + testNetns + " lacks address 10.244.0.5/32"}},
			wantCode: api.CodeCheckFailed,
			wantMsg:  "pod interface eth0 in " + testNetns + " lacks address 10.244.0.5/32",
		},
		{
			name:     "kernel unreadable",
			checkErr: errors.New("look up host interface: netlink socket closed"),
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
			netns:    "/run/netns/other",
			wantCode: api.CodeCheckFailed,
			wantMsg:  "agent recorded netns /run/netns/other",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.agent.getResp = endpoint()
			if tt.netns != "" {
				h.agent.getResp.Netns = tt.netns
			}
			h.agent.getErr = tt.getErr
			h.net.checkErr = tt.checkErr
			err := h.plugin.checkCmd(t.Context(), h.cmdArgs(h.conf("1.1.0", tt.extra)))
			if tt.wantCode != 0 {
				wantCode(t, err, tt.wantCode, tt.wantMsg)
				return
			}
			if err != nil {
				t.Fatalf("checkCmd() error = %v", err)
			}
			want := netsetup.CheckArgs{Netns: testNetns, HostIf: hostIf, PodIf: "eth0"}
			got := h.net.lastCheck
			if got.Netns != want.Netns || got.HostIf != want.HostIf || got.PodIf != want.PodIf ||
				!slices.Equal(got.Addresses, []netip.Prefix{netip.MustParsePrefix("10.244.0.5/24")}) {
				t.Fatalf("check args = %+v, want %+v with the agent's address", got, want)
			}
		})
	}
}
