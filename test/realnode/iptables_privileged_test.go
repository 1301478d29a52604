//go:build linux

package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeIptablesDataplane switches lockstep to the iptables
// dataplane as an operator does (the lockstep-config ConfigMap, then a
// rolling restart of the agents), checks that each agent cleaned up the
// eBPF dataplane it left, and runs the pod network and probe checks again:
// both dataplanes must give the same answers on a real node. It switches
// back to eBPF at the end.
func TestPrivilegedRealNodeIptablesDataplane(t *testing.T) {
	c := cluster(t)
	if err := c.SetDataplane(t.Context(), "iptables"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := c.SetDataplane(ctx, "ebpf"); err != nil {
			t.Errorf("switch back to eBPF: %v", err)
		}
	})
	for _, h := range c.Nodes {
		err := realnode.Poll(t.Context(), 2*time.Minute, time.Second, "the agent of "+h.Name+" to run iptables with nothing of eBPF left", func() (bool, string, error) {
			st := agentStatus(t, c, h)
			if st.Dataplane == nil {
				return false, "no dataplane yet", nil
			}
			if !strings.HasPrefix(st.Dataplane.Name, "iptables") {
				return false, "dataplane " + st.Dataplane.Name, nil
			}
			if len(st.Dataplane.PendingCleanups) > 0 {
				return false, fmt.Sprintf("pending clean-ups %+v", st.Dataplane.PendingCleanups), nil
			}
			out, err := c.Exec(t.Context(), h, "sh", "-c", "ls /sys/fs/bpf/lockstep 2>/dev/null; for l in $(ls /sys/class/net); do tc filter show dev $l ingress; tc filter show dev $l egress; done")
			if err != nil {
				return false, err.Error(), nil
			}
			if strings.TrimSpace(string(out)) != "" {
				return false, "eBPF leftovers: " + string(out), nil
			}
			return true, "", nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("pod network", func(t *testing.T) { checkPodNetwork(t, c, "ipt-net") })
	t.Run("probes pass a default deny", func(t *testing.T) { checkProbesPass(t, c, "ipt-probes") })
}

// agentStatus is c.AgentStatus, failing tb when the agent does not answer.
func agentStatus(tb testing.TB, c *realnode.Cluster, h realnode.Host) *api.StatusResponse {
	tb.Helper()
	st, err := c.AgentStatus(tb.Context(), h)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
