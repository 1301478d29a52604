//go:build linux

package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/realnode"
)

const (
	node1 = "e2e-node-1"
	node2 = "e2e-node-2"
)

// TestPrivilegedRealNodePodNetwork checks what every pod needs on a real
// node with lockstep installed from deploy/: an address from its node's
// block in each family, pod to pod on one node and across nodes, a
// ClusterIP Service (kube-proxy's DNAT), one of internalTrafficPolicy Local
// (only its node's pods reach it), one of trafficDistribution PreferClose,
// externalIPs, load-balancer IPs and NodePorts under policy, the endpoints of a headless
// Service, both by name through the cluster DNS, and the world outside the
// cluster (masqueraded to the node's address).
func TestPrivilegedRealNodePodNetwork(t *testing.T) {
	checkPodNetwork(t, cluster(t), "smoke-net")
}

// checkPodNetwork is TestPrivilegedRealNodePodNetwork in namespace ns, for
// whichever dataplane runs.
func checkPodNetwork(t *testing.T, c *realnode.Cluster, ns string) {
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		agnhostPod(ns, "a1", node1, map[string]string{"app": "server"}),
		agnhostPod(ns, "a2", node1, map[string]string{"app": "client"}),
		agnhostPod(ns, "b1", node2, map[string]string{"app": "server"}),
		agnhostPod(ns, "b2", node2, map[string]string{"app": "local-only"}),
		service(ns, "server", false),
		service(ns, "server-headless", true),
		localService(ns, "server-local", "local-only"),
	}, "\n---\n"))
	pods := waitReady(t, c, ns, "a1", "a2", "b1", "b2")

	for name, p := range pods {
		for _, fam := range []string{"4", "6"} {
			ip := p.ip(fam)
			if ip == "" {
				t.Fatalf("pod %s has no IPv%s address: %+v", name, fam, p.Status.PodIPs)
			}
			if !inPool(ip) {
				t.Errorf("pod %s got %s, outside the IPPools %v", name, ip, realnode.PodCIDRs)
			}
		}
	}

	t.Run("pod to pod", func(t *testing.T) {
		for _, from := range []string{"a2", "b1"} {
			for _, to := range []string{"a1", "b1"} {
				if from == to {
					continue
				}
				for _, fam := range []string{"4", "6"} {
					addr := net.JoinHostPort(pods[to].ip(fam), "8080")
					if !connect(t, c, ns, from, addr, "tcp") {
						t.Errorf("%s (%s) cannot reach %s at %s", from, pods[from].Spec.NodeName, to, addr)
					}
				}
			}
		}
	})

	t.Run("ClusterIP Service", func(t *testing.T) {
		for _, ip := range dualStackClusterIPs(t, c, ns, "server") {
			for _, from := range []string{"a2", "b1"} {
				addr := net.JoinHostPort(ip, "80")
				if !connect(t, c, ns, from, addr, "tcp") {
					t.Errorf("%s cannot reach Service server at %s", from, addr)
				}
			}
		}
	})

	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		// server-local's one endpoint, b2, runs on node 2: b1, beside it,
		// reaches it; a2 on node 1 is dropped without an answer, as
		// kube-proxy drops what a node without a local endpoint sends
		// (REFUSED only while node 1 has not yet seen b2's endpoint).
		ips := dualStackClusterIPs(t, c, ns, "server-local")
		agent1 := agentPod(t, c, node1)
		h1, err := c.Node(node1)
		if err != nil {
			t.Fatal(err)
		}
		st := agentStatus(t, c, h1).Dataplane
		ebpfTranslates := st != nil && st.Name == "ebpf" && st.Services != nil && !st.Services.LeftToKubeProxy
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, "80")
			err := realnode.Poll(t.Context(), time.Minute, time.Second, "b1 to reach server-local at "+addr, func() (bool, string, error) {
				return connect(t, c, ns, "b1", addr, "tcp"), "no connection", nil
			})
			if err != nil {
				t.Error(err)
				continue
			}
			err = realnode.Poll(t.Context(), time.Minute, time.Second, "a2 (on "+node1+") to be dropped by server-local at "+addr, func() (bool, string, error) {
				switch got := connectOutcome(t, c, ns, "a2", addr, "tcp"); got {
				case "TIMEOUT":
					return true, "", nil
				case "":
					return false, "", fmt.Errorf("a2 on %s connected to server-local at %s, whose only endpoint is on %s", node1, addr, node2)
				default:
					return false, got, nil
				}
			})
			if err != nil {
				t.Error(err)
				continue
			}
			// lockstep's own answer, whichever dataplane: from its store.
			if r := explainInAgent(t, c, agent1, ns+"/a2", ip, "80"); r.Verdict != "deny" || !strings.Contains(r.Reason, "no local backend") {
				t.Errorf("explain a2 to %s: %s: %s; want deny, no local backend", addr, r.Verdict, r.Reason)
			}
			if s := agentStatus(t, c, h1).Dataplane; s == nil || s.Services == nil || s.Services.WithoutLocalBackends < 1 {
				t.Errorf("lockstep status on %s does not count server-local's frontends as without a local backend: %+v", node1, s)
			}
			if !ebpfTranslates {
				continue // kube-proxy dropped it (the iptables dataplane)
			}
			// The eBPF dataplane dropped it, before kube-proxy saw it.
			before := datapathPackets(t, c, agent1, "service-no-backend")
			if got := connectOutcome(t, c, ns, "a2", addr, "tcp"); got != "TIMEOUT" {
				t.Errorf("a2 to %s again: %q, want TIMEOUT", addr, got)
			}
			if after := datapathPackets(t, c, agent1, "service-no-backend"); after <= before {
				t.Errorf("lockstep_datapath_packets_total{reason=\"service-no-backend\"} on %s stayed at %v: the eBPF programs did not drop a2's connection", node1, after)
			}
		}
	})

	t.Run("trafficDistribution PreferClose", func(t *testing.T) {
		// The nodes are in zones z1 and z2 before the backends exist, so
		// the endpoint-slice controller hints each endpoint for its node's
		// zone. server-close's backend on node 2 listens on no port the
		// Service targets: a connection sent there is refused. So a pod on
		// node 1 connects every time only if its node follows the hints,
		// and one on node 2 is refused every time only if its node does
		// (without them each try has even odds either way).
		for node, zone := range map[string]string{node1: "z1", node2: "z2"} {
			if out, err := c.Kubectl(t.Context(), "label", "node", node, "topology.kubernetes.io/zone="+zone, "--overwrite"); err != nil {
				t.Fatalf("label %s: %v\n%s", node, err, out)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if out, err := c.Kubectl(ctx, "label", "node", node, "topology.kubernetes.io/zone-"); err != nil {
					t.Logf("remove the zone label of %s: %v\n%s", node, err, out)
				}
			})
		}
		apply(t, c, strings.Join([]string{
			agnhostPodOnPort(ns, "close-1", node1, map[string]string{"app": "close"}, 8080),
			agnhostPodOnPort(ns, "close-2", node2, map[string]string{"app": "close"}, 8081),
			closeService(ns, "server-close", "close"),
		}, "\n---\n"))
		waitReady(t, c, ns, "close-1", "close-2")
		err := realnode.Poll(t.Context(), time.Minute, time.Second, "zone hints on every endpoint of server-close", func() (bool, string, error) {
			var list struct {
				Items []struct {
					Endpoints []struct {
						Addresses []string `json:"addresses"`
						Hints     *struct {
							ForZones []struct{ Name string } `json:"forZones"`
						} `json:"hints"`
					} `json:"endpoints"`
				} `json:"items"`
			}
			if err := c.GetJSON(t.Context(), &list, "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=server-close"); err != nil {
				return false, "", err
			}
			n := 0
			for _, sl := range list.Items {
				for _, e := range sl.Endpoints {
					if e.Hints == nil || len(e.Hints.ForZones) != 1 {
						return false, fmt.Sprintf("endpoint %v has hints %+v", e.Addresses, e.Hints), nil
					}
					n++
				}
			}
			return n == 4, fmt.Sprintf("%d hinted endpoints, want 2 per family", n), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// outcomes reports whether n connections of a pod to addr all
		// ended as want, and how they ended.
		outcomes := func(pod, addr, want string, n int) (bool, string) {
			var got []string
			all := true
			for range n {
				g := connectOutcome(t, c, ns, pod, addr, "tcp")
				got = append(got, g)
				all = all && g == want
			}
			return all, fmt.Sprintf("outcomes %q, want %d times %q", got, n, want)
		}
		for _, ip := range dualStackClusterIPs(t, c, ns, "server-close") {
			addr := net.JoinHostPort(ip, "80")
			for _, from := range []struct{ pod, want string }{{"a2", ""}, {"b1", "REFUSED"}} {
				// Until the hints and the zone have reached the node, then
				// 16 times more in a row (without hints, odds of 1 in 2^16).
				what := from.pod + " to reach only its zone's backend of server-close at " + addr
				err := realnode.Poll(t.Context(), time.Minute, time.Second, what, func() (bool, string, error) {
					ok, got := outcomes(from.pod, addr, from.want, 4)
					return ok, got, nil
				})
				if err != nil {
					t.Error(err)
					continue
				}
				if ok, got := outcomes(from.pod, addr, from.want, 16); !ok {
					t.Errorf("%s, once it had: %s", what, got)
				}
			}
			// lockstep's own answer, from each node's store (kube-proxy
			// follows the hints too: this is what says lockstep does).
			for _, from := range []struct{ pod, node, backend string }{{"a2", node1, "close-1"}, {"b1", node2, "close-2"}} {
				r := explainInAgent(t, c, agentPod(t, c, from.node), ns+"/"+from.pod, ip, "80")
				if len(r.Backends) != 1 || r.Backends[0].To.Pod != ns+"/"+from.backend {
					t.Errorf("lockstep explain --from %s/%s --to %s: backends %+v, want only %s", ns, from.pod, ip, r.Backends, from.backend)
				}
			}
		}
	})

	t.Run("externalIPs, load-balancer IPs and NodePorts", func(t *testing.T) {
		// A pod's connection to a Service's externalIP or load-balancer
		// IP, or to a NodePort on its node's address, is translated
		// before egress policy judges it, on both dataplanes (README,
		// Services): by kube-proxy before iptables' FORWARD, by lockstep
		// in from_pod, which marks it for kube-proxy's masquerade. So
		// egress is judged on the backend, and a NodePort on the other
		// node's address, translated only there, on that address. A
		// backend on the other node judges the node's address (the
		// masquerade) on both, one on the client's node the client pod
		// (iptables in FORWARD, before kube-proxy's masquerade; eBPF
		// without one).
		// server-ext's one backend is on the other node, server-ext-local's
		// on the client's, so each connection has one answer.
		h1, err := c.Node(node1)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := c.Node(node2)
		if err != nil {
			t.Fatal(err)
		}
		backendLabels := func(app string) map[string]string {
			return map[string]string{"app": app, "role": "ext-backend"}
		}
		apply(t, c, strings.Join([]string{
			agnhostPod(ns, "x1", node1, map[string]string{"app": "ext-client"}),
			agnhostPod(ns, "xs1", node1, backendLabels("ext-local")),
			agnhostPod(ns, "xs2", node2, backendLabels("ext-server")),
			externalService(ns, "server-ext", "LoadBalancer", "ext-server", externalIPv4, externalIPv6),
			externalService(ns, "server-ext-local", "NodePort", "ext-local"),
		}, "\n---\n"))
		// The addresses are the same in every namespace that runs this.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if out, err := c.Kubectl(ctx, "delete", "service", "-n", ns, "server-ext", "server-ext-local"); err != nil {
				t.Logf("delete server-ext and server-ext-local: %v\n%s", err, out)
			}
		})
		ext := waitReady(t, c, ns, "x1", "xs1", "xs2")
		// What a load-balancer controller would write; kube-proxy routes
		// the addresses as it routes externalIPs.
		status := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q},{"ip":%q}]}}}`, loadBalancerIPv4, loadBalancerIPv6)
		if out, err := c.Kubectl(t.Context(), "patch", "service", "-n", ns, "server-ext", "--subresource=status", "-p", status); err != nil {
			t.Fatalf("give server-ext its load-balancer IPs: %v\n%s", err, out)
		}
		nodePort, localNodePort := serviceNodePort(t, c, ns, "server-ext"), serviceNodePort(t, c, ns, "server-ext-local")
		join := func(addrs []netip.Addr, port string) []string {
			var out []string
			for _, a := range addrs {
				out = append(out, net.JoinHostPort(a.String(), port))
			}
			return out
		}
		extAddrs := []netip.Addr{netip.MustParseAddr(externalIPv4), netip.MustParseAddr(externalIPv6),
			netip.MustParseAddr(loadBalancerIPv4), netip.MustParseAddr(loadBalancerIPv6)}
		node1Addrs, node2Addrs := []netip.Addr{h1.IPv4, h1.IPv6}, []netip.Addr{h2.IPv4, h2.IPv6}
		// The frontends, by where kube-proxy translates them and where
		// their backend runs.
		remote := append(join(extAddrs, "80"), join(node1Addrs, nodePort)...) // node 1, backend on node 2
		local := join(node1Addrs, localNodePort)                              // node 1, backend on node 1
		other := join(node2Addrs, nodePort)                                   // node 2, backend on node 2
		backends := []any{map[string]any{
			"to":    []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]string{"role": "ext-backend"}}}},
			"ports": []any{map[string]any{"protocol": "TCP", "port": 8080}},
		}}
		var blocks []any
		for _, a := range slices.Concat(extAddrs, node1Addrs, node2Addrs) {
			blocks = append(blocks, map[string]any{"ipBlock": map[string]any{"cidr": netip.PrefixFrom(a, a.BitLen()).String()}})
		}
		addresses := []any{map[string]any{"to": blocks}}
		both := append(slices.Clone(backends), addresses...)
		type answers struct{ remote, local, other string }
		for _, step := range []struct {
			name    string
			egress  []any
			ingress bool    // the backends admit only ext-client
			want    answers // on either dataplane
		}{
			// First every frontend answers, so that a later TIMEOUT is
			// the policy's.
			{"its egress allows both", both, false, answers{"", "", ""}},
			{"its egress allows the backends", backends, false, answers{"", "", "TIMEOUT"}},
			{"its egress allows the frontend addresses", addresses, false, answers{"TIMEOUT", "TIMEOUT", ""}},
			// A backend on the other node sees the node's address (the
			// masquerade), and one on the client's the client. What goes
			// to node 2's address left node 1 masqueraded already
			// (lockstep's masquerade: not a pod address).
			{"its egress allows both and the backends admit only it", both, true, answers{"TIMEOUT", "", "TIMEOUT"}},
		} {
			manifests := []string{egressPolicy(ns, "ext-client-egress", "ext-client", step.egress)}
			if step.ingress {
				manifests = append(manifests,
					ingressPolicy(ns, "ext-server-ingress", "ext-server", "ext-client"),
					ingressPolicy(ns, "ext-local-ingress", "ext-local", "ext-client"))
			}
			apply(t, c, strings.Join(manifests, "\n---\n"))
			want := step.want
			what := fmt.Sprintf("x1, when %s, to connect through the externalIPs, load-balancer IPs and NodePorts with outcomes %+v", step.name, want)
			// A round that waits out its TIMEOUTs takes about 40 s.
			err := realnode.Poll(t.Context(), 3*time.Minute, time.Second, what, func() (bool, string, error) {
				var got []string
				ok := true
				check := func(from, addr, want string) {
					g := connectOutcome(t, c, ns, from, addr, "tcp")
					got = append(got, fmt.Sprintf("%s to %s: %q", from, addr, g))
					ok = ok && g == want
				}
				if step.ingress {
					// Both nodes enforce the backends' ingress policies:
					// a pod they do not admit is refused.
					for _, name := range []string{"xs1", "xs2"} {
						check("a2", net.JoinHostPort(ext[name].ip("4"), "8080"), "TIMEOUT")
					}
				}
				for _, f := range []struct {
					addrs []string
					want  string
				}{{remote, want.remote}, {local, want.local}, {other, want.other}} {
					for _, addr := range f.addrs {
						check("x1", addr, f.want)
					}
				}
				return ok, strings.Join(got, ", "), nil
			})
			if err != nil {
				t.Error(err)
			}
		}
		// What the ingress policies refused was the node's address: x1
		// itself is admitted.
		for _, name := range []string{"xs1", "xs2"} {
			for _, fam := range []string{"4", "6"} {
				addr := net.JoinHostPort(ext[name].ip(fam), "8080")
				if got := connectOutcome(t, c, ns, "x1", addr, "tcp"); got != "" {
					t.Errorf("x1 to %s at %s under its ingress policy: %q, want a connection", name, addr, got)
				}
			}
		}
	})

	t.Run("headless Service endpoints", func(t *testing.T) {
		ips := endpointIPs(t, c, ns, "server-headless")
		if len(ips) != 4 {
			t.Fatalf("headless Service has endpoints %v, want the two servers' four addresses", ips)
		}
		for _, ip := range ips {
			if !connect(t, c, ns, "a2", net.JoinHostPort(ip, "8080"), "tcp") {
				t.Errorf("a2 cannot reach headless endpoint %s", ip)
			}
		}
	})

	t.Run("names through the cluster DNS", func(t *testing.T) {
		// CoreDNS learns the new Services through its watch of the API
		// server, a connection through the kubernetes Service: after a
		// switch of dataplanes it is reset and re-established, within
		// about a minute (client-go's idle ping), and names of Services
		// made meanwhile resolve only then.
		for _, addr := range []string{
			"server." + ns + ".svc.cluster.local:80", // the ClusterIP
			"server-headless." + ns + ":8080",        // a server pod, by the search path
		} {
			for _, from := range []string{"a2", "b1"} {
				err := realnode.Poll(t.Context(), 2*time.Minute, 2*time.Second, from+" to reach "+addr, func() (bool, string, error) {
					return connect(t, c, ns, from, addr, "tcp"), "no connection", nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		}
	})

	t.Run("outside the cluster, masqueraded", func(t *testing.T) {
		srv := listenOutside(t, c)
		for _, from := range []string{"a2", "b1"} {
			node, err := c.Node(pods[from].Spec.NodeName)
			if err != nil {
				t.Fatal(err)
			}
			for _, dst := range []netip.Addr{c.OutsideV4, c.OutsideV6} {
				addr := net.JoinHostPort(dst.String(), fmt.Sprint(srv.port))
				if !connect(t, c, ns, from, addr, "tcp") {
					t.Errorf("%s cannot reach %s outside the cluster", from, addr)
					continue
				}
				want := node.IPv4
				if dst.Is6() {
					want = node.IPv6
				}
				if got := srv.lastPeer(); got != want {
					t.Errorf("%s reached %s from %s, want its node's address %s (masquerade)", from, addr, got, want)
				}
			}
		}
	})
}

// TestPrivilegedRealNodeProbesPassDefaultDeny isolates every pod of a
// namespace for ingress and checks that the kubelet's probes, which come
// from the pod's own node, still pass: a pod that was Ready stays Ready and
// is never restarted by its liveness probe, a pod created under the policy
// becomes Ready, while another pod's connection is dropped.
func TestPrivilegedRealNodeProbesPassDefaultDeny(t *testing.T) {
	checkProbesPass(t, cluster(t), "smoke-probes")
}

// checkProbesPass is TestPrivilegedRealNodeProbesPassDefaultDeny in
// namespace ns, for whichever dataplane runs.
func checkProbesPass(t *testing.T, c *realnode.Cluster, ns string) {
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		probedPod(ns, "web-before", node1),
		agnhostPod(ns, "client-1", node1, map[string]string{"app": "client"}),
		agnhostPod(ns, "client-2", node2, map[string]string{"app": "client"}),
	}, "\n---\n"))
	pods := waitReady(t, c, ns, "web-before", "client-1", "client-2")
	web := net.JoinHostPort(pods["web-before"].ip("4"), "8080")
	for _, from := range []string{"client-1", "client-2"} {
		if !connect(t, c, ns, from, web, "tcp") {
			t.Fatalf("%s cannot reach web-before before any policy", from)
		}
	}

	apply(t, c, fmt.Sprintf(`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
		"metadata":{"name":"default-deny-ingress","namespace":%q},
		"spec":{"podSelector":{},"policyTypes":["Ingress"]}}`, ns))
	err := realnode.Poll(t.Context(), time.Minute, time.Second, "the default deny to be enforced", func() (bool, string, error) {
		for _, from := range []string{"client-1", "client-2"} {
			if connect(t, c, ns, from, web, "tcp") {
				return false, from + " still reaches web-before", nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// lockstep explain judges from the agent's store, not from the
	// dataplane: it names the policy whichever dataplane runs.
	r := explainInAgent(t, c, agentPod(t, c, node1), ns+"/client-2", ns+"/web-before", "8080")
	if r.Verdict != "deny" || !slices.Contains(r.Ingress.Policies, ns+"/default-deny-ingress") || !strings.Contains(r.Ingress.Reason, "default deny") {
		t.Errorf("explain client-2 to web-before: verdict %q, ingress %+v; want deny by default deny of %s/default-deny-ingress", r.Verdict, r.Ingress, ns)
	}
	apply(t, c, probedPod(ns, "web-after", node2))

	// Three liveness periods and more: a probe that failed three times in
	// a row would have restarted the container.
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		p := getPod(t, c, ns, "web-before")
		if !p.ready() || p.restarts() != 0 {
			t.Fatalf("web-before under default deny: ready=%v restarts=%d; the kubelet's probes were dropped", p.ready(), p.restarts())
		}
		time.Sleep(2 * time.Second)
	}
	after := waitReady(t, c, ns, "web-after")["web-after"]
	if after.restarts() != 0 {
		t.Errorf("web-after restarted %d times", after.restarts())
	}
	if connect(t, c, ns, "client-1", net.JoinHostPort(after.ip("4"), "8080"), "tcp") {
		t.Error("client-1 reaches web-after through the default deny")
	}
}

// TestPrivilegedRealNodeDeleteReleasesAddress deletes a pod and checks that
// the kubelet's CNI DEL gave its address back to its node's pool and
// removed its host interface.
func TestPrivilegedRealNodeDeleteReleasesAddress(t *testing.T) {
	c := cluster(t)
	const ns = "smoke-release"
	namespace(t, c, ns, nil)
	h, err := c.Node(node2)
	if err != nil {
		t.Fatal(err)
	}
	before := poolsUsed(t, c, h)
	apply(t, c, agnhostPod(ns, "short-lived", node2, nil))
	p := waitReady(t, c, ns, "short-lived")["short-lived"]
	if got := poolsUsed(t, c, h); got != before+2 {
		t.Fatalf("pools of %s hold %d addresses with the pod, want %d (one per family more than %d)", node2, got, before+2, before)
	}
	if _, err := c.Kubectl(t.Context(), "delete", "pod", "-n", ns, "short-lived", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	err = realnode.Poll(t.Context(), time.Minute, time.Second, "the address to be released", func() (bool, string, error) {
		got := poolsUsed(t, c, h)
		return got == before, fmt.Sprintf("%d used, want %d", got, before), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	links, err := c.Exec(t.Context(), h, "ip", "-o", "route", "show", p.ip("4"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(links)) != "" {
		t.Errorf("the route to the deleted pod's %s is still on %s: %s", p.ip("4"), node2, links)
	}
}

// service renders a dual-stack Service selecting app=server, port 80 to
// the pods' named port http; headless without a ClusterIP.
func service(ns, name string, headless bool) string {
	spec := map[string]any{
		"selector":       map[string]string{"app": "server"},
		"ipFamilyPolicy": "RequireDualStack",
		"ports":          []any{map[string]any{"name": "http", "port": 80, "targetPort": "http"}},
	}
	if headless {
		spec["clusterIP"] = "None"
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec})
	return string(b)
}

// dualStackClusterIPs returns Service ns/name's ClusterIPs, failing tb
// unless it has one per family.
func dualStackClusterIPs(tb testing.TB, c *realnode.Cluster, ns, name string) []string {
	tb.Helper()
	var svc struct {
		Spec struct {
			ClusterIPs []string `json:"clusterIPs"`
		} `json:"spec"`
	}
	if err := c.GetJSON(tb.Context(), &svc, "service", "-n", ns, name); err != nil {
		tb.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		tb.Fatalf("Service %s has ClusterIPs %v, want one per family", name, svc.Spec.ClusterIPs)
	}
	return svc.Spec.ClusterIPs
}

// The externalIPs and load-balancer IPs of server-ext: documentation
// addresses, which a pod sends through its node like any address outside
// the cluster, and kube-proxy there translates.
const (
	externalIPv4     = "198.51.100.10"
	externalIPv6     = "2001:db8:51::10"
	loadBalancerIPv4 = "198.51.100.20"
	loadBalancerIPv6 = "2001:db8:51::20"
)

// externalService renders a dual-stack Service of type typ (NodePort or
// LoadBalancer), with externalIPs if any, selecting app=app, port 80 to
// the pods' named port http.
func externalService(ns, name, typ, app string, externalIPs ...string) string {
	spec := map[string]any{
		"type":           typ,
		"selector":       map[string]string{"app": app},
		"ipFamilyPolicy": "RequireDualStack",
		"ports":          []any{map[string]any{"name": "http", "port": 80, "targetPort": "http"}},
	}
	if len(externalIPs) > 0 {
		spec["externalIPs"] = externalIPs
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec})
	return string(b)
}

// serviceNodePort returns the NodePort of Service ns/name's one port.
func serviceNodePort(tb testing.TB, c *realnode.Cluster, ns, name string) string {
	tb.Helper()
	var svc struct {
		Spec struct {
			Ports []struct {
				NodePort int `json:"nodePort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	if err := c.GetJSON(tb.Context(), &svc, "service", "-n", ns, name); err != nil {
		tb.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		tb.Fatalf("Service %s has ports %+v, want one with a NodePort", name, svc.Spec.Ports)
	}
	return fmt.Sprint(svc.Spec.Ports[0].NodePort)
}

// egressPolicy renders a NetworkPolicy isolating app=app for egress with
// the given egress rules.
func egressPolicy(ns, name, app string, rules []any) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]string{"app": app}},
			"policyTypes": []string{"Egress"},
			"egress":      rules,
		},
	})
	return string(b)
}

// closeService renders a dual-stack Service of trafficDistribution
// PreferClose selecting app=app, port 80 to port 8080.
func closeService(ns, name, app string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":            map[string]string{"app": app},
			"ipFamilyPolicy":      "RequireDualStack",
			"trafficDistribution": "PreferClose",
			"ports":               []any{map[string]any{"name": "http", "port": 80, "targetPort": 8080}},
		}})
	return string(b)
}

// localService renders a dual-stack Service of internalTrafficPolicy Local
// selecting app=app, port 80 to the pods' named port http.
func localService(ns, name, app string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":              map[string]string{"app": app},
			"ipFamilyPolicy":        "RequireDualStack",
			"internalTrafficPolicy": "Local",
			"ports":                 []any{map[string]any{"name": "http", "port": 80, "targetPort": "http"}},
		}})
	return string(b)
}

// probedPod renders an agnhost netexec pod with httpGet readiness and
// liveness probes on the port a default deny closes to other pods.
func probedPod(ns, name, node string) string {
	probe := map[string]any{"httpGet": map[string]any{"path": "/hostname", "port": 8080},
		"periodSeconds": 2, "timeoutSeconds": 1, "failureThreshold": 3}
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]string{"app": "web"}},
		"spec": map[string]any{
			"nodeName":                      node,
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "agnhost", "image": realnode.AgnhostImage, "imagePullPolicy": "IfNotPresent",
				"args":           []string{"netexec", "--http-port=8080", "--udp-port=8080"},
				"readinessProbe": probe, "livenessProbe": probe,
			}},
		},
	})
	return string(b)
}

func inPool(ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, p := range realnode.PodCIDRs {
		if netip.MustParsePrefix(p).Contains(a) {
			return true
		}
	}
	return false
}

// endpointIPs lists the ready endpoint addresses of a Service's
// EndpointSlices.
func endpointIPs(tb testing.TB, c *realnode.Cluster, ns, svc string) []string {
	tb.Helper()
	var list struct {
		Items []struct {
			Endpoints []struct {
				Addresses  []string `json:"addresses"`
				Conditions struct {
					Ready *bool `json:"ready"`
				} `json:"conditions"`
			} `json:"endpoints"`
		} `json:"items"`
	}
	if err := c.GetJSON(tb.Context(), &list, "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name="+svc); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	return out
}

// poolsUsed returns how many addresses a node's agent has allocated, from
// `lockstep status` run on the node.
func poolsUsed(tb testing.TB, c *realnode.Cluster, h realnode.Host) int {
	tb.Helper()
	n := 0
	for _, p := range agentStatus(tb, c, h).Pools {
		n += int(p.Used)
	}
	return n
}
