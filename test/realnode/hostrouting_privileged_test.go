//go:build linux

package realnode_test

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedRealNodeHostRouting checks host routing on the eBPF
// dataplane: a pod's TCP connections to a pod of the other node, by
// address and through a ClusterIP, and that pod's TCP connections to it,
// pass none of its node's netfilter either way (counting rules in the
// node's raw table see none of their packets), while a UDP datagram the
// other pod sends it does pass it (only the node's conntrack can tell a
// new flow from a reply kube-proxy must translate).
func TestPrivilegedRealNodeHostRouting(t *testing.T) {
	c := cluster(t)
	if dp, err := c.Dataplane(t.Context()); err != nil || dp != "ebpf" {
		t.Fatalf("the cluster runs the %q dataplane (%v); host routing is the eBPF dataplane's", dp, err)
	}
	const ns = "host-routing"
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		agnhostPod(ns, "client", node1, map[string]string{"app": "client"}),
		agnhostPod(ns, "server", node2, map[string]string{"app": "server"}),
		service(ns, "server", false),
	}, "\n---\n"))
	pods := waitReady(t, c, ns, "client", "server")
	client, server := pods["client"].ip("4"), pods["server"].ip("4")
	var svc struct {
		Spec struct {
			ClusterIP string `json:"clusterIP"`
		} `json:"spec"`
	}
	if err := c.GetJSON(t.Context(), &svc, "service", "-n", ns, "server"); err != nil {
		t.Fatal(err)
	}
	n1, err := c.Node(node1)
	if err != nil {
		t.Fatal(err)
	}

	// Two counting rules on node 1, first in raw PREROUTING, where every
	// packet the node's stack receives is seen before anything else.
	rules := map[string][]string{
		"request": {"-s", client, "-d", server},
		"reply":   {"-s", server, "-d", client},
	}
	for name, match := range rules {
		args := append([]string{"iptables", "-w", "-t", "raw", "-I", "PREROUTING", "1"}, match...)
		args = append(args, "-m", "comment", "--comment", "lockstep-test-"+name)
		if out, err := c.Exec(t.Context(), n1, args...); err != nil {
			t.Fatalf("add counting rule: %v: %s", err, out)
		}
		del := append([]string{"iptables", "-w", "-t", "raw", "-D", "PREROUTING"}, match...)
		del = append(del, "-m", "comment", "--comment", "lockstep-test-"+name)
		t.Cleanup(func() {
			// t.Context is done by now.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if out, err := c.Exec(ctx, n1, del...); err != nil {
				t.Errorf("remove counting rule: %v: %s", err, out)
			}
		})
	}
	counts := func() map[string]int {
		t.Helper()
		out, err := c.Exec(t.Context(), n1, "iptables", "-w", "-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n")
		if err != nil {
			t.Fatalf("read counting rules: %v", err)
		}
		got := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^\s*(\d+)\s+\d+.*lockstep-test-(\w+)`).FindAllStringSubmatch(string(out), -1) {
			got[m[2]], _ = strconv.Atoi(m[1])
		}
		if len(got) != len(rules) {
			t.Fatalf("counting rules missing from node 1's raw table:\n%s", out)
		}
		return got
	}

	for _, conn := range []struct{ from, addr string }{
		{"client", net.JoinHostPort(server, "8080")},
		{"client", net.JoinHostPort(svc.Spec.ClusterIP, "80")},
		{"server", net.JoinHostPort(client, "8080")},
	} {
		for range 3 {
			if !connect(t, c, ns, conn.from, conn.addr, "tcp") {
				t.Fatalf("%s cannot reach %s", conn.from, conn.addr)
			}
		}
	}
	if got := counts(); got["request"] != 0 || got["reply"] != 0 {
		t.Errorf("node 1's netfilter saw %d packets from the client to the server and %d back, want none (host routing)", got["request"], got["reply"])
	}
	if !connect(t, c, ns, "server", net.JoinHostPort(client, "8080"), "udp") {
		t.Fatalf("server cannot reach the client over UDP")
	}
	if got := counts(); got["reply"] == 0 {
		t.Errorf("node 1's netfilter saw no UDP datagram from the server: the counting rule does not count (%v)", got)
	}
}
