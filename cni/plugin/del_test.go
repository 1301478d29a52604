package plugin

import (
	"fmt"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

// TestDel: DEL is one call, with no namespace: the agent removes the host
// link, and the pod end with it.
func TestDel(t *testing.T) {
	tests := []struct {
		name  string
		netns string
	}{
		{name: "netns present", netns: testNetns},
		{name: "netns already gone", netns: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.agent.delResp = api.DelResponse{Found: true, HostIfName: hostIf}
			args := h.cmdArgs(h.conf("1.1.0", ""))
			args.Netns = tt.netns
			if err := h.plugin.del(t.Context(), args); err != nil {
				t.Fatalf("del() error = %v", err)
			}
			if got, want := h.events.list(), []string{"agent cni-del"}; !slices.Equal(got, want) {
				t.Fatalf("steps = %q, want %q", got, want)
			}
		})
	}
}

func TestDelFailures(t *testing.T) {
	t.Run("malformed config", func(t *testing.T) {
		h := newHarness(t)
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs([]byte(`{`))), types.ErrInvalidNetworkConfig, "invalid network config")
		if got := h.events.list(); len(got) != 0 {
			t.Fatalf("steps = %q, want none", got)
		}
	})
	t.Run("link cannot be removed", func(t *testing.T) {
		h := newHarness(t)
		h.agent.delErr = &api.Error{Code: api.CodeIOFailure, Msg: "remove pod network: device busy", Details: "the address stays reserved until DEL succeeds; the runtime retries DEL"}
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))), types.ErrIOFailure, "the runtime retries DEL")
	})
	t.Run("agent error passes through", func(t *testing.T) {
		h := newHarness(t)
		h.agent.delErr = api.Errorf(api.CodeInternal, "write state: disk full")
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))), api.CodeInternal, "disk full")
	})
	t.Run("older agent", func(t *testing.T) {
		h := newHarness(t)
		stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":%q}`, oldAgent(t)))
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(stdin)), types.ErrTryAgainLater, `no operation "cni-del"`)
	})
}

// TestDelAgentUnreachable: DEL cannot release without the agent, so it
// fails with code 11 and the runtime retries it.
func TestDelAgentUnreachable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":%q}`, h.socket+".absent"))
	wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(stdin)), types.ErrTryAgainLater, "unreachable")
}
