package plugin

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

func TestDel(t *testing.T) {
	tests := []struct {
		name      string
		delResp   api.DelResponse
		wantSteps []string
	}{
		{
			name:      "agent had a record",
			delResp:   api.DelResponse{Found: true, HostIfName: hostIf},
			wantSteps: []string{"teardown " + hostIf, "agent del", "teardown " + hostIf},
		},
		{
			name:      "agent has no record",
			delResp:   api.DelResponse{Found: false},
			wantSteps: []string{"teardown " + hostIf, "agent del"},
		},
		{
			name:      "agent recorded another host interface",
			delResp:   api.DelResponse{Found: true, HostIfName: "ls000000000000"},
			wantSteps: []string{"teardown " + hostIf, "agent del", "teardown " + hostIf, "teardown ls000000000000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.agent.delResp = tt.delResp
			if err := h.plugin.del(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))); err != nil {
				t.Fatalf("del() error = %v", err)
			}
			if got := h.events.list(); !slices.Equal(got, tt.wantSteps) {
				t.Fatalf("steps = %q, want %q", got, tt.wantSteps)
			}
		})
	}
}

// TestDelIsIdempotent: the runtime may repeat DEL, with the netns gone and
// nothing left anywhere; every repetition succeeds.
func TestDelIsIdempotent(t *testing.T) {
	h := newHarness(t)
	h.net.links[hostIf] = true
	h.agent.delResp = api.DelResponse{Found: true, HostIfName: hostIf}
	args := h.cmdArgs(h.conf("1.1.0", ""))
	if err := h.plugin.del(t.Context(), args); err != nil {
		t.Fatalf("first del() error = %v", err)
	}
	h.agent.delResp = api.DelResponse{}
	args.Netns = ""
	for i := range 2 {
		if err := h.plugin.del(t.Context(), args); err != nil {
			t.Fatalf("repeated del() #%d error = %v", i+1, err)
		}
	}
	if h.net.links[hostIf] {
		t.Fatalf("host link %s survived DEL", hostIf)
	}
}

func TestDelFailures(t *testing.T) {
	t.Run("malformed config", func(t *testing.T) {
		h := newHarness(t)
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs([]byte(`{`))), types.ErrInvalidNetworkConfig, "invalid network config")
	})
	t.Run("link cannot be removed", func(t *testing.T) {
		h := newHarness(t)
		h.net.teardownErr[hostIf] = errors.New("delete host interface: device busy")
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))), types.ErrIOFailure, "the runtime retries DEL")
		if got := h.events.list(); slices.Contains(got, "agent del") {
			t.Fatalf("steps = %q: the address was released while still routed", got)
		}
	})
	t.Run("agent error passes through", func(t *testing.T) {
		h := newHarness(t)
		h.agent.delErr = api.Errorf(api.CodeInternal, "write state: disk full")
		wantCode(t, h.plugin.del(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))), api.CodeInternal, "disk full")
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
