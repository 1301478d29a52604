//go:build linux

package realnode_test

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeHostilePolicy: one tenant's NetworkPolicy that
// lockstep cannot enforce as written (more ipBlock except prefixes than a
// namespace's budget) fails closed for that tenant's pods only. The
// agents stay up and ready, another tenant's pods start and talk on both
// nodes, the policy carries a FailsClosed Event, and deleting the policy
// gives the tenant's pod back its traffic.
func TestPrivilegedRealNodeHostilePolicy(t *testing.T) {
	c := cluster(t)
	const hog, other = "hostile-hog", "hostile-other"
	namespace(t, c, hog, nil)
	namespace(t, c, other, nil)
	apply(t, c, agnhostPod(hog, "victim", node1, map[string]string{"app": "victim"}))
	victim := net.JoinHostPort(waitReady(t, c, hog, "victim")["victim"].ip("4"), "8080")

	// As written, the policy lets all of IPv4 but 5000 addresses reach the
	// victim: 5001 prefixes, more than a namespace's budget of 4095.
	excepts := make([]string, 5000)
	for i := range excepts {
		excepts[i] = fmt.Sprintf("198.18.%d.%d/32", i/250, i%250+1)
	}
	np, _ := json.Marshal(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "hog", "namespace": hog},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]string{"app": "victim"}},
			"policyTypes": []string{"Ingress"},
			"ingress": []any{map[string]any{"from": []any{map[string]any{
				"ipBlock": map[string]any{"cidr": "0.0.0.0/0", "except": excepts}}}}},
		},
	})
	// create, not apply: apply's last-applied annotation would be larger
	// than the policy is worth.
	if out, err := c.KubectlIn(t.Context(), string(np), "create", "-f", "-"); err != nil {
		t.Fatalf("create the policy: %v\n%s", err, out)
	}

	// The other tenant's pods start, on both nodes, and reach each other.
	apply(t, c, strings.Join([]string{
		agnhostPod(other, "server", node1, map[string]string{"app": "server"}),
		agnhostPod(other, "client", node2, map[string]string{"app": "client"}),
	}, "\n---\n"))
	pods := waitReady(t, c, other, "server", "client")
	if !connect(t, c, other, "client", net.JoinHostPort(pods["server"].ip("4"), "8080"), "tcp") {
		t.Error("another tenant's client cannot reach its server while the hostile policy exists")
	}

	// The victim fails closed: the client, which the policy as written
	// allows, is refused.
	err := realnode.Poll(t.Context(), time.Minute, time.Second, "the hostile policy to fail closed", func() (bool, string, error) {
		if connect(t, c, other, "client", victim, "tcp") {
			return false, "the client still reaches the victim", nil
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = realnode.Poll(t.Context(), time.Minute, 2*time.Second, "a FailsClosed Event on the policy", func() (bool, string, error) {
		out, err := c.Kubectl(t.Context(), "get", "events", "-n", hog, "-o", "name",
			"--field-selector", "involvedObject.kind=NetworkPolicy,involvedObject.name=hog,reason=FailsClosed")
		if err != nil {
			return false, "", err
		}
		return strings.TrimSpace(string(out)) != "", "no Event yet", nil
	})
	if err != nil {
		t.Error(err)
	}
	for _, node := range []string{node1, node2} {
		name := agentPod(t, c, node)
		if p := getPod(t, c, "kube-system", name); !p.ready() || p.restarts() != 0 {
			t.Errorf("agent %s on %s: ready=%v restarts=%d; a tenant's policy must leave it alone", name, node, p.ready(), p.restarts())
		}
	}

	// Without the policy, the victim is reachable again.
	if out, err := c.Kubectl(t.Context(), "delete", "networkpolicy", "-n", hog, "hog"); err != nil {
		t.Fatalf("delete the policy: %v\n%s", err, out)
	}
	err = realnode.Poll(t.Context(), time.Minute, time.Second, "the victim to be reachable without the policy", func() (bool, string, error) {
		return connect(t, c, other, "client", victim, "tcp"), "the client cannot reach the victim", nil
	})
	if err != nil {
		t.Error(err)
	}
}
