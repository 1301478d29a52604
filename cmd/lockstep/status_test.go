package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

func TestWriteStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		st   api.StatusResponse
		want []string
	}{
		{
			name: "clean-up pending after a failed attempt",
			st: api.StatusResponse{Dataplane: &api.DataplaneStatus{
				Name: "iptables-nft", LastApply: now.Add(-2 * time.Second),
				Counts:   map[string]int{"sets": 4, "rules": 40},
				Services: &api.ServicesStatus{Frontends: 6, Backends: 9, WithoutBackends: 1},
				PendingCleanups: []api.CleanupStatus{{Backend: "iptables-legacy", Reason: "dataplane changed",
					Since: now.Add(-time.Hour), Attempts: 3, LastError: "exit status 4"}},
			}},
			want: []string{"iptables-nft", "ok, 2s ago", "rules:", "40", "6 frontends, 9 backends, 1 without a ready endpoint",
				"Pending clean-ups:  1", "iptables-legacy:", "3 attempts", "last error: exit status 4"},
		},
		{
			name: "Services without a backend on this node",
			st: api.StatusResponse{Dataplane: &api.DataplaneStatus{
				Name: "ebpf", LastApply: now.Add(-time.Second),
				Services: &api.ServicesStatus{Frontends: 3, Backends: 2, WithoutBackends: 1, WithoutLocalBackends: 1},
			}},
			want: []string{"3 frontends, 2 backends, 1 without a ready endpoint, 1 without one on this node (internalTrafficPolicy Local: dropped)"},
		},
		{
			name: "Services left to kube-proxy",
			st: api.StatusResponse{Dataplane: &api.DataplaneStatus{
				Name: "ebpf", LastApply: now.Add(-time.Second),
				Services: &api.ServicesStatus{Frontends: 3, Backends: 4, LeftToKubeProxy: true},
			}},
			want: []string{"3 frontends, 4 backends (translated by kube-proxy, not lockstep)"},
		},
		{
			name: "a namespace's Services over the node's capacity",
			st: api.StatusResponse{Dataplane: &api.DataplaneStatus{
				Name: "ebpf", LastApply: now.Add(-time.Second),
				Services: &api.ServicesStatus{Frontends: 4, Backends: 6,
					OverCapacity: []api.ServicesOverCapacity{{Namespace: "hostile", Reason: "the node's Service maps are full"}}},
			}},
			want: []string{"4 frontends, 6 backends\n", "namespace hostile not translated:", "the node's Service maps are full"},
		},
		{
			name: "a policy fails closed",
			st: api.StatusResponse{Dataplane: &api.DataplaneStatus{
				Name: "ebpf", LastApply: now.Add(-time.Second),
				FailedPolicies:  []api.PolicyFailure{{Policy: "team/cidr", Reason: "networkpolicy team/cidr: spec.ingress[0]: from[0]: ipBlock: cidr: bad"}},
				FailedEndpoints: []api.EndpointFailure{{HostIf: "ls1", Ingress: "networkpolicy team/cidr: spec.ingress[0]"}},
			}},
			want: []string{"1 policies, 1 endpoints (isolated, no allow", "policy team/cidr:", "ipBlock: cidr: bad", "endpoint ls1 ingress:"},
		},
		{
			name: "apply failed",
			st:   api.StatusResponse{Dataplane: &api.DataplaneStatus{Name: "ebpf", LastApplyError: "attach ls1: no such device"}},
			want: []string{"FAILED: attach ls1: no such device", "Pending clean-ups:  none"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeStatus(&buf, &tc.st, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, buf.String())
				}
			}
		})
	}
}
