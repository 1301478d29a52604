//go:build linux

package realnode_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeAgentRestart deletes lockstep's agent pods, as a
// rolling update or a crash does, while a TCP connection between two pods
// of different nodes streams under policies that allow it only one way (the
// replies pass on conntrack alone). The DaemonSet re-creates each agent;
// the connection must not stall or break. Then, with no agent on the nodes
// at all, a new pod is created: it must wait (its sandbox cannot get an
// address) and start once the agents are back.
func TestPrivilegedRealNodeAgentRestart(t *testing.T) {
	c := cluster(t)
	const ns = "smoke-restart"
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		// nc ends the connection when its stdin ends: feed it one that
		// never does.
		busyboxPod(ns, "server", node1, map[string]string{"app": "server"}, "sleep 1000000 | nc -l -p 9000"),
		`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"default-deny","namespace":"` + ns + `"},
		  "spec":{"podSelector":{},"policyTypes":["Ingress","Egress"]}}`,
		`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"client-to-server","namespace":"` + ns + `"},
		  "spec":{"podSelector":{"matchLabels":{"app":"client"}},"policyTypes":["Egress"],
		          "egress":[{"to":[{"podSelector":{"matchLabels":{"app":"server"}}}],"ports":[{"port":9000}]}]}}`,
		`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"server-from-client","namespace":"` + ns + `"},
		  "spec":{"podSelector":{"matchLabels":{"app":"server"}},"policyTypes":["Ingress"],
		          "ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"client"}}}],"ports":[{"port":9000}]}]}}`,
	}, "\n---\n"))
	server := waitReady(t, c, ns, "server")["server"]
	// One line every 100ms, numbered, over one connection.
	script := fmt.Sprintf("i=0; while true; do i=$((i+1)); echo $i; sleep 0.1; done | nc %s 9000", server.ip("4"))
	apply(t, c, busyboxPod(ns, "client", node2, map[string]string{"app": "client"}, script))
	waitReady(t, c, ns, "client")

	// streaming checks that the server keeps receiving consecutive numbers
	// for d, and returns the last.
	last := 0
	streaming := func(what string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			time.Sleep(time.Second)
			n := receivedUpTo(t, c, ns)
			if n <= last {
				t.Fatalf("%s: the server received nothing new for a second (stuck at %d)", what, n)
			}
			last = n
		}
		for _, name := range []string{"server", "client"} {
			p := getPod(t, c, ns, name)
			if p.Status.Phase != "Running" || p.restarts() != 0 {
				t.Fatalf("%s: %s is %s with %d restarts: the connection broke", what, name, p.Status.Phase, p.restarts())
			}
		}
	}
	streaming("before any restart", 3*time.Second)

	for _, node := range []string{node1, node2} {
		agent := agentPod(t, c, node)
		if _, err := c.Kubectl(t.Context(), "-n", "kube-system", "delete", "pod", agent, "--wait=true"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitLockstep(t.Context(), 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		if now := agentPod(t, c, node); now == agent {
			t.Fatalf("agent pod %s of %s was not replaced", agent, node)
		}
		streaming("after the agent of "+node+" was replaced", 3*time.Second)
	}

	t.Run("new pods wait for the agent", func(t *testing.T) {
		// No node matches: the DaemonSet controller removes every agent.
		off := `{"spec":{"template":{"spec":{"nodeSelector":{"lockstep.dev/e2e-no-agent":"true"}}}}}`
		if _, err := c.Kubectl(t.Context(), "-n", "kube-system", "patch", "daemonset", "lockstep-agent", "-p", off); err != nil {
			t.Fatal(err)
		}
		restored := false
		restore := func() {
			if restored {
				return
			}
			restored = true
			on := `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`
			if _, err := c.Kubectl(t.Context(), "-n", "kube-system", "patch", "daemonset", "lockstep-agent", "--type", "json", "-p", on); err != nil {
				t.Error(err)
			}
		}
		t.Cleanup(restore)
		err := realnode.Poll(t.Context(), 2*time.Minute, time.Second, "every agent pod to be gone", func() (bool, string, error) {
			names, err := c.Kubectl(t.Context(), "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=lockstep-agent", "-o", "name")
			return err == nil && strings.TrimSpace(string(names)) == "", string(names), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		apply(t, c, agnhostPod(ns, "late", node1, map[string]string{"app": "late"}))
		time.Sleep(10 * time.Second)
		if p := getPod(t, c, ns, "late"); p.Status.PodIP != "" || p.ready() {
			t.Fatalf("pod late got %q (ready=%v) with no agent on its node", p.Status.PodIP, p.ready())
		}
		restore()
		if err := c.WaitLockstep(t.Context(), 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		late := waitReady(t, c, ns, "late")["late"]
		if !inPool(late.ip("4")) {
			t.Errorf("late got %s, not a lockstep address", late.ip("4"))
		}
	})
	streaming("after every agent came back", 2*time.Second)
}

// receivedUpTo returns the last number the server printed, checking that
// it printed 1, 2, 3... with none missing or repeated (one connection,
// never re-established).
func receivedUpTo(tb testing.TB, c *realnode.Cluster, ns string) int {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "logs", "-n", ns, "server")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, line := range strings.Fields(string(out)) {
		v, err := strconv.Atoi(line)
		if err != nil || v != n+1 {
			tb.Fatalf("the server received %q after %d: not one unbroken stream", line, n)
		}
		n = v
	}
	return n
}

// agentPod returns the name of lockstep's agent pod on node.
func agentPod(tb testing.TB, c *realnode.Cluster, node string) string {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=lockstep-agent",
		"--field-selector", "spec.nodeName="+node, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		tb.Fatal(err)
	}
	names := strings.Fields(string(out))
	if len(names) != 1 {
		tb.Fatalf("agent pods on %s: %v, want one", node, names)
	}
	return names[0]
}

// busyboxPod renders a pod running a shell script in busybox.
func busyboxPod(ns, name, node string, labels map[string]string, script string) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec": map[string]any{
			"nodeName":                      node,
			"restartPolicy":                 "Never",
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "busybox", "image": realnode.BusyboxImage, "imagePullPolicy": "IfNotPresent",
				"command": []string{"/bin/sh", "-c", script},
			}},
		},
	})
	return string(b)
}
