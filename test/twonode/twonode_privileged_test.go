//go:build linux

package twonode

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/routes"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

const (
	testNamespace = "twonode"
	httpPort      = 8080
	// containerPorts declares the named port the policy refers to.
	containerPorts = `[{"name":"http","containerPort":8080}]`
	// serverPolicy lets only role=allowed pods reach the server's named
	// port "http"; the server is on one node, every client on the other.
	serverPolicy = `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
		"metadata":{"name":"server-ingress","namespace":"twonode"},
		"spec":{"podSelector":{"matchLabels":{"app":"server"}},"policyTypes":["Ingress"],
		"ingress":[{"from":[{"podSelector":{"matchLabels":{"role":"allowed"}}}],"ports":[{"port":"http"}]}]}}`
)

// TestKubePrivilegedTwoNodesRouteAndEnforcePolicy runs the operator and two
// agents in Kubernetes mode against one API server. Each node's pods get
// addresses from the blocks the operator gave its NodeIPAM, each node
// routes the other's blocks through
// the other's InternalIP, pods ping across nodes, and a NetworkPolicy on a
// server pod of node-b admits exactly the node-a pods its peer selector
// picks, by labels the server's agent learns only from the API server,
// following a label swap.
func TestKubePrivilegedTwoNodesRouteAndEnforcePolicy(t *testing.T) {
	testenv.Privileged(t)
	a := &node{name: "node-a", ip: netip.MustParsePrefix("192.168.77.1/24")}
	b := &node{name: "node-b", ip: netip.MustParsePrefix("192.168.77.2/24")}
	c := newCluster(t)
	c.addNode(a)
	c.addNode(b)
	c.startOperator()
	for _, n := range c.nodes {
		n.blocks = c.waitBlocks(n)
		t.Logf("operator assigned %s the blocks %v", n.name, n.blocks)
	}
	linkNodes(t, a, b)
	for _, n := range c.nodes {
		if err := n.sim.StartAgent(t.Context()); err != nil {
			t.Fatalf("start agent of %s: %v", n.name, err)
		}
	}
	c.apply(fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, testNamespace))

	server := c.addPod(b, testNamespace, "server", map[string]string{"app": "server"}, containerPorts)
	peerB := c.addPod(b, testNamespace, "b-peer", map[string]string{"app": "peer"}, "[]")
	client1 := c.addPod(a, testNamespace, "client-1", map[string]string{"role": "allowed"}, "[]")
	client2 := c.addPod(a, testNamespace, "client-2", map[string]string{"role": "other"}, "[]")
	pods := []*pod{server, peerB, client1, client2}

	t.Run("addresses come from each node's own blocks", func(t *testing.T) {
		for _, x := range a.blocks {
			for _, y := range b.blocks {
				if x.Overlaps(y) {
					t.Fatalf("the operator gave both nodes %s and %s", x, y)
				}
			}
		}
		seen := map[netip.Addr]string{}
		for _, p := range pods {
			if !p.node.owns(p.ip) {
				t.Errorf("pod %s on %s got %s, outside its node's blocks %v", p.name, p.node.name, p.ip, p.node.blocks)
			}
			if other, dup := seen[p.ip]; dup {
				t.Errorf("pods %s and %s both got %s", other, p.name, p.ip)
			}
			seen[p.ip] = p.name
		}
	})

	t.Run("each node routes the other's blocks via its InternalIP", func(t *testing.T) {
		for _, pair := range [][2]*node{{a, b}, {b, a}} {
			self, peer := pair[0], pair[1]
			var want []routes.Route
			for _, blk := range peer.blocks {
				want = append(want, routes.Route{Dst: blk, Via: peer.ip.Addr()})
			}
			eventually(t, fmt.Sprintf("%s routes %v", self.name, peer.blocks), func() (bool, string) {
				got := inNS(t, self.sim.NS, routes.List)
				return slices.Equal(got, want), fmt.Sprintf("lockstep's routes are %v, want %v", got, want)
			})
		}
	})

	t.Run("pods ping across nodes", func(t *testing.T) {
		for _, pair := range [][2]*pod{{client1, server}, {server, client2}, {peerB, client1}} {
			src, dst := pair[0], pair[1]
			eventually(t, fmt.Sprintf("ping %s (%s) -> %s (%s)", src.name, src.node.name, dst.name, dst.node.name), func() (bool, string) {
				err := nodesim.Ping(src.netns, dst.ip, time.Second)
				return err == nil, fmt.Sprint(err)
			})
		}
	})

	t.Run("traffic between nodes keeps the pod's address", func(t *testing.T) {
		// Each agent masquerades what leaves the cluster, and the other
		// node's blocks are the cluster: the peer sees client-1 itself.
		stop, err := nodesim.ServeWhoAmI(peerB.netns, netip.AddrPortFrom(peerB.ip, httpPort+1))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		seen, err := nodesim.WhoAmI(client1.netns, netip.AddrPortFrom(peerB.ip, httpPort+1), 2*time.Second)
		if err != nil || seen != client1.ip {
			t.Fatalf("%s saw %v (%v), want client-1's own %s", peerB.name, seen, err, client1.ip)
		}
	})

	listenTCP(t, server, httpPort)
	// reach reports which clients can open a connection to the server.
	reach := func() map[string]bool {
		out := map[string]bool{}
		for _, cl := range []*pod{client1, client2} {
			out[cl.name] = connect(t, cl, server.ip, httpPort, 500*time.Millisecond)
		}
		return out
	}
	expect := func(t *testing.T, want map[string]bool) {
		t.Helper()
		eventually(t, fmt.Sprintf("server reachable exactly from %v", want), func() (bool, string) {
			got := reach()
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("reachable: %v", got)
		})
	}

	t.Run("without a policy every client connects", func(t *testing.T) {
		expect(t, map[string]bool{"client-1": true, "client-2": true})
	})

	t.Run("the policy admits only the remote pods its peer selector picks", func(t *testing.T) {
		c.apply(serverPolicy)
		expect(t, map[string]bool{"client-1": true, "client-2": false})
		// Converged: it stays so.
		if got := reach(); !got["client-1"] || got["client-2"] {
			t.Errorf("after converging, reachable: %v", got)
		}
	})

	t.Run("swapping the remote pods' labels swaps who gets in", func(t *testing.T) {
		c.kubectl(nil, "label", "pod", "client-1", "-n", testNamespace, "role=other", "--overwrite")
		c.kubectl(nil, "label", "pod", "client-2", "-n", testNamespace, "role=allowed", "--overwrite")
		expect(t, map[string]bool{"client-1": false, "client-2": true})
	})

	t.Run("deleting the policy opens the server again", func(t *testing.T) {
		c.kubectl(nil, "delete", "networkpolicy", "server-ingress", "-n", testNamespace)
		expect(t, map[string]bool{"client-1": true, "client-2": true})
	})
}

// TestKubePrivilegedAgentNotReadyUntilItsNodeHasBlocks starts an agent
// whose node has no NodeIPAM yet: CNI STATUS answers 50 (the runtime holds
// pods back) naming what the agent waits for, an ADD fails with 11 (try
// again later), and once a NodeIPAM controlled by the node assigns a block
// the agent becomes ready and allocates from it.
func TestKubePrivilegedAgentNotReadyUntilItsNodeHasBlocks(t *testing.T) {
	testenv.Privileged(t)
	n := &node{name: "node-solo", ip: netip.MustParsePrefix("192.168.77.1/24")}
	c := newCluster(t)
	c.addNode(n)
	started := make(chan error, 1)
	go func() { started <- n.sim.StartAgent(t.Context()) }()

	eventually(t, "CNI STATUS says the agent waits for its NodeIPAM", func() (bool, string) {
		err := n.sim.Status(t.Context())
		var cniErr *types.Error
		if !errors.As(err, &cniErr) {
			return false, fmt.Sprintf("STATUS: %v", err)
		}
		return cniErr.Code == types.ErrPluginNotAvailable && strings.Contains(cniErr.Msg, "NodeIPAM of node node-solo"),
			fmt.Sprintf("STATUS: code %d: %s", cniErr.Code, cniErr.Msg)
	})
	netns, err := nodesim.Create(nodesim.Name(podPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.Delete(netns) })
	rt := nodesim.Runtime("ctr-early", netns, "eth0", "default", "early")
	_, err = n.sim.Add(t.Context(), rt)
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD before the node has blocks: %v, want code %d", err, types.ErrTryAgainLater)
	}

	block := netip.MustParsePrefix("10.244.7.0/26")
	c.apply(fmt.Sprintf(`{"apiVersion":"lockstep.dev/v1alpha1","kind":"NodeIPAM","metadata":{"name":%q,
		"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":%q,"uid":%q,"controller":true}]},
		"spec":{"blocks":[{"cidr":%q,"pool":"default"}]}}`, n.name, n.name, n.uid, block))
	if err := <-started; err != nil {
		t.Fatalf("agent did not become ready once its NodeIPAM had a block: %v", err)
	}
	if err := n.sim.Status(t.Context()); err != nil {
		t.Fatalf("STATUS of a ready agent: %v", err)
	}
	n.blocks = []netip.Prefix{block}
	p := c.addPod(n, "default", "late", map[string]string{"app": "late"}, "[]")
	if !n.owns(p.ip) {
		t.Errorf("pod got %s, outside the node's block %s", p.ip, block)
	}
}
