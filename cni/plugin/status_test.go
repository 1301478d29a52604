package plugin

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

func pool(name, cidr string, free uint64, draining bool) api.PoolStatus {
	return api.PoolStatus{Name: name, CIDR: netip.MustParsePrefix(cidr), Size: 254, Used: 254 - free, Free: free, Draining: draining}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name    string
		pools   []api.PoolStatus
		err     *api.Error
		wantMsg string // "" means available
	}{
		{name: "free addresses", pools: []api.PoolStatus{pool("v4", "10.244.0.0/24", 10, false), pool("v6", "fd00::/120", 200, false)}},
		{
			name:    "a pool is full",
			pools:   []api.PoolStatus{pool("v4", "10.244.0.0/24", 0, false), pool("v6", "fd00::/120", 200, false)},
			wantMsg: "no free IPv4 address: pool v4 (10.244.0.0/24) exhausted",
		},
		{
			name:  "another pool of the family has room",
			pools: []api.PoolStatus{pool("a", "10.244.0.0/24", 0, false), pool("b", "10.245.0.0/24", 4, false)},
		},
		{
			name:    "the IPv6 family is full",
			pools:   []api.PoolStatus{pool("v4", "10.244.0.0/24", 9, false), pool("v6", "fd00::/120", 0, false)},
			wantMsg: "no free IPv6 address: pool v6 (fd00::/120) exhausted",
		},
		{
			name:  "a draining pool may be full",
			pools: []api.PoolStatus{pool("old", "10.243.0.0/24", 0, true), pool("new", "10.244.0.0/24", 5, false)},
		},
		{
			name:    "only draining pools",
			pools:   []api.PoolStatus{pool("old", "10.243.0.0/24", 9, true)},
			wantMsg: "no pool to allocate from",
		},
		{
			name:    "agent fails",
			err:     api.Errorf(api.CodeInternal, "state store closed"),
			wantMsg: "cannot report its status: state store closed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.agent.statusResp = api.StatusResponse{Pools: tt.pools}
			h.agent.statusErr = tt.err
			err := h.plugin.status(t.Context(), h.cmdArgs(h.conf("1.1.0", "")))
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("status() error = %v", err)
				}
				return
			}
			wantCode(t, err, types.ErrPluginNotAvailable, tt.wantMsg)
		})
	}
}

func TestStatusAgentUnreachable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	absent := h.socket + ".absent"
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":%q}`, absent))
	wantCode(t, h.plugin.status(t.Context(), h.cmdArgs(stdin)), types.ErrPluginNotAvailable, "lockstep agent unreachable at "+absent)
}
