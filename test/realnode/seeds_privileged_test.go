//go:build linux

package realnode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeSeed001StatefulSetRecreated replays the whereabouts
// reconciler race (seed 001) with a real kubelet and StatefulSet
// controller: the pods of a StatefulSet are force-deleted while Pending
// (their init container still runs, their addresses allocated) and
// re-created at once under the same names with new UIDs, and the deletions
// prompt the agent's orphan reconcile while the new pods are Pending. No
// live pod's address may be
// freed or handed to another pod, and every address of a deleted pod must
// come back to the pool.
func TestPrivilegedRealNodeSeed001StatefulSetRecreated(t *testing.T) {
	c := cluster(t)
	const ns = "seed001"
	namespace(t, c, ns, nil)
	h, err := c.Node(node1)
	if err != nil {
		t.Fatal(err)
	}
	before := poolsUsed(t, c, h)
	apply(t, c, statefulSet(ns, "web", node1, 3))
	// Pending with an address: the init container sleeps.
	err = realnode.Poll(t.Context(), 2*time.Minute, time.Second, "every web pod to have an address, Pending", func() (bool, string, error) {
		used := poolsUsed(t, c, h)
		return used == before+6, fmt.Sprintf("%d addresses used, want %d", used, before+6), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{}
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		p := getPod(t, c, ns, name)
		old[name] = p.Metadata.UID
		if p.Status.Phase != "Pending" {
			t.Fatalf("%s is %s before the replay, want Pending", name, p.Status.Phase)
		}
	}
	// The StatefulSet controller re-creates each under its name at once.
	if _, err := c.Kubectl(t.Context(), "delete", "pod", "-n", ns, "web-0", "web-1", "--grace-period=0", "--force"); err != nil {
		t.Fatal(err)
	}
	pods := waitReady(t, c, ns, "web-0", "web-1", "web-2")
	for _, name := range []string{"web-0", "web-1"} {
		if pods[name].Metadata.UID == old[name] {
			t.Fatalf("%s was not re-created", name)
		}
	}
	if pods["web-2"].Metadata.UID != old["web-2"] {
		t.Fatal("web-2 was re-created; it was never deleted")
	}
	// One address per pod and family, no more (the old web-0 and web-1
	// were released), no less (no live pod lost its address).
	err = realnode.Poll(t.Context(), 2*time.Minute, time.Second, "the deleted pods' addresses to be released", func() (bool, string, error) {
		used := poolsUsed(t, c, h)
		return used == before+6, fmt.Sprintf("%d addresses used, want %d", used, before+6), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkUniqueAddresses(t, c)
	// Each pod answers at its own address: none was given to another.
	for name, p := range pods {
		for _, fam := range []string{"4", "6"} {
			got, err := hostnameAt(c, h, p.ip(fam))
			if err != nil || got != name {
				t.Errorf("%s of %s answers %q (%v), want its own name", p.ip(fam), name, got, err)
			}
		}
	}
}

// TestPrivilegedRealNodeSeed003NodeRecreated replays Azure CNS's stale node
// config (seed 003) with a real kubelet and garbage collector: a Node is
// deleted while its pods run and its kubelet restarts, as on a replaced
// machine, registering it again under the same name with a new UID; the
// garbage collector deletes the old NodeIPAM and the operator makes a new
// one. The agent must come back on the new
// NodeIPAM, the running pods must keep their addresses, and new pods must
// get addresses nobody holds.
func TestPrivilegedRealNodeSeed003NodeRecreated(t *testing.T) {
	c := cluster(t)
	const ns = "seed003"
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		agnhostPod(ns, "before-1", node2, nil),
		agnhostPod(ns, "before-2", node2, nil),
	}, "\n---\n"))
	before := waitReady(t, c, ns, "before-1", "before-2")
	oldUID := objectUID(t, c, "node", node2)
	oldIPAM := objectUID(t, c, "nodeipam", node2)

	if _, err := c.Kubectl(t.Context(), "delete", "node", node2, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	// A kubelet registers its Node when it starts, as on a machine that
	// was replaced or rebooted: the node's init starts it again.
	h, err := c.Node(node2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), h, "pkill", "-x", "kubelet"); err != nil {
		t.Fatal(err)
	}
	err = realnode.Poll(t.Context(), 3*time.Minute, time.Second, "the node and its NodeIPAM to be re-created", func() (bool, string, error) {
		var n, ipam struct {
			Metadata struct {
				UID             string `json:"uid"`
				OwnerReferences []struct {
					UID string `json:"uid"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
		}
		if err := c.GetJSON(t.Context(), &n, "node", node2); err != nil {
			return false, err.Error(), nil
		}
		if err := c.GetJSON(t.Context(), &ipam, "nodeipam", node2); err != nil {
			return false, err.Error(), nil
		}
		switch {
		case n.Metadata.UID == oldUID:
			return false, "the Node has its old UID", nil
		case ipam.Metadata.UID == oldIPAM:
			return false, "the NodeIPAM is the old one", nil
		case len(ipam.Metadata.OwnerReferences) != 1 || ipam.Metadata.OwnerReferences[0].UID != n.Metadata.UID:
			return false, "the NodeIPAM is not owned by the new Node", nil
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitLockstep(t.Context(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("after-%d", i))
		apply(t, c, agnhostPod(ns, names[i], node2, nil))
	}
	waitReady(t, c, ns, names...)
	checkUniqueAddresses(t, c)
	for name, p := range before {
		now := getPod(t, c, ns, name)
		if now.Metadata.UID != p.Metadata.UID {
			// The pod garbage collector may remove the pods of a Node it
			// found missing; then there is nothing to keep.
			t.Logf("%s was deleted with its Node", name)
			continue
		}
		if got, err := hostnameAt(c, h, p.ip("4")); err != nil || got != name {
			t.Errorf("%s at %s answers %q (%v) after its Node was re-created, want its own name", name, p.ip("4"), got, err)
		}
	}
}

// checkUniqueAddresses fails tb when two pods of the cluster hold one
// address.
func checkUniqueAddresses(tb testing.TB, c *realnode.Cluster) {
	tb.Helper()
	var list struct {
		Items []pod `json:"items"`
	}
	if err := c.GetJSON(tb.Context(), &list, "pods", "-A"); err != nil {
		tb.Fatal(err)
	}
	holder := map[string]string{}
	for _, p := range list.Items {
		if p.Status.Phase != "Running" && p.Status.Phase != "Pending" || p.Metadata.DeletionTimestamp != nil {
			continue // a terminating pod's address may already be free
		}
		for _, a := range p.Status.PodIPs {
			if !inPool(a.IP) {
				continue // host network
			}
			who := p.Metadata.Namespace + "/" + p.Metadata.Name
			if other, ok := holder[a.IP]; ok {
				tb.Errorf("%s is held by %s and %s", a.IP, other, who)
			}
			holder[a.IP] = who
		}
	}
}

// objectUID returns the UID of a cluster-scoped object.
func objectUID(tb testing.TB, c *realnode.Cluster, kind, name string) string {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "get", kind, name, "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// hostnameAt asks agnhost netexec at ip:8080 for its host name (the pod's
// name), from the node h: as a kubelet probe does.
func hostnameAt(c *realnode.Cluster, h realnode.Host, ip string) (string, error) {
	node, err := ns.GetNS(nodesim.Path(h.Netns))
	if err != nil {
		return "", err
	}
	defer node.Close()
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "", err
	}
	var body string
	err = node.Do(func(ns.NetNS) error {
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, 8080).String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET /hostname HTTP/1.0\r\nHost: %s\r\n\r\n", ip); err != nil {
			return err
		}
		r := bufio.NewReader(conn)
		status, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(status, " 200 ") {
			return fmt.Errorf("GET /hostname: %s", strings.TrimSpace(status))
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			if strings.TrimSpace(line) == "" {
				break
			}
		}
		rest, _ := r.ReadString(0)
		body = strings.TrimSpace(rest)
		return nil
	})
	return body, err
}

// statefulSet renders a StatefulSet of agnhost netexec pods on one node
// whose init container keeps them Pending for 20 seconds after their
// sandbox (and address) exists; created and deleted in parallel.
func statefulSet(ns, name, node string, replicas int) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"replicas":            replicas,
			"serviceName":         name,
			"podManagementPolicy": "Parallel",
			"selector":            map[string]any{"matchLabels": map[string]string{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]string{"app": name}},
				"spec": map[string]any{
					"nodeSelector":                  map[string]string{"kubernetes.io/hostname": node},
					"terminationGracePeriodSeconds": 1,
					"initContainers": []any{map[string]any{
						"name": "wait", "image": realnode.BusyboxImage, "imagePullPolicy": "IfNotPresent",
						"command": []string{"sleep", "20"},
					}},
					"containers": []any{map[string]any{
						"name": "agnhost", "image": realnode.AgnhostImage, "imagePullPolicy": "IfNotPresent",
						"args": []string{"netexec", "--http-port=8080", "--udp-port=8080"},
					}},
				},
			},
		},
	})
	return string(b)
}

// TestPrivilegedRealNodeSeed004PoolShrunk replays Cilium's excess-IP release
// race (seed 004) on the real nodes: an administrator shrinks the IPv4
// IPPool under running pods, so the operator marks every block outside it
// for release (a drain) while the kubelet keeps starting pods on the node.
// At every moment, every running pod's address must lie in a block its
// node still holds (the operator never takes back a block in use), no
// address may be held twice, the pods of the drained blocks keep their
// addresses, pods started after the drain get addresses in the pool's new
// range, and a drained block goes back once its pods are deleted.
func TestPrivilegedRealNodeSeed004PoolShrunk(t *testing.T) {
	c := cluster(t)
	const ns = "seed004"
	namespace(t, c, ns, nil)
	old := []string{"old-0", "old-1", "old-2"}
	for _, name := range old {
		apply(t, c, agnhostPod(ns, name, node2, map[string]string{"gen": "old"}))
	}
	before := waitReady(t, c, ns, old...)
	drained := map[string]bool{}
	for _, b := range nodeBlocks(t, c, node2) {
		if !strings.Contains(b, ":") {
			drained[b] = true
		}
	}

	// The watcher: every second, every running pod's address must be in a
	// block of its node.
	stop := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			checkPodsInTheirBlocks(t, c)
		}
	}()
	defer func() {
		close(stop)
		<-watcherDone
	}()

	shrunk := "10.244.128.0/17"
	setPool := func(ctx context.Context, cidr string) error {
		patch := fmt.Sprintf(`{"spec":{"cidrs":[%q]}}`, cidr)
		_, err := c.Kubectl(ctx, "patch", "ippool", "default-ipv4", "--type", "merge", "-p", patch)
		return err
	}
	if err := setPool(t.Context(), shrunk); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setPool(context.Background(), "10.244.0.0/16"); err != nil {
			t.Errorf("restore the pool: %v", err)
		}
	})
	// Pods started while the operator and the agent do the handshake.
	var during []string
	for i := range 3 {
		during = append(during, fmt.Sprintf("during-%d", i))
		apply(t, c, agnhostPod(ns, during[i], node2, map[string]string{"gen": "during"}))
	}
	err := realnode.Poll(t.Context(), 2*time.Minute, time.Second, "the drain marks and a block in the new range", func() (bool, string, error) {
		var ipam nodeIPAM
		if err := c.GetJSON(t.Context(), &ipam, "nodeipam", node2); err != nil {
			return false, err.Error(), nil
		}
		marked := 0
		for _, m := range ipam.Spec.Releases {
			if drained[m.CIDR] && m.Drain && m.State == "marked-for-release" {
				marked++
			}
		}
		fresh := false
		for _, b := range ipam.Spec.Blocks {
			block, err := netip.ParsePrefix(b.CIDR)
			fresh = fresh || err == nil && inPrefix(block.Addr().String(), shrunk)
		}
		return marked == len(drained) && fresh, fmt.Sprintf("%d of %d blocks drain-marked, a block in %s: %v", marked, len(drained), shrunk, fresh), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, during...)
	var after []string
	for i := range 3 {
		after = append(after, fmt.Sprintf("after-%d", i))
		apply(t, c, agnhostPod(ns, after[i], node2, map[string]string{"gen": "after"}))
	}
	for name, p := range waitReady(t, c, ns, after...) {
		if !inPrefix(p.ip("4"), shrunk) {
			t.Errorf("%s started after the drain and got %s, outside the shrunk pool %s", name, p.ip("4"), shrunk)
		}
	}
	checkUniqueAddresses(t, c)
	h, err := c.Node(node2)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range before {
		if got, err := hostnameAt(c, h, p.ip("4")); err != nil || got != name {
			t.Errorf("%s at %s answers %q (%v) while its block drains, want its own name", name, p.ip("4"), got, err)
		}
	}

	// The pods of the drained blocks go, the cluster DNS's too (rolled
	// as an administrator moves workloads off a drained range): so do the
	// blocks.
	if _, err := c.Kubectl(t.Context(), "delete", "pods", "-n", ns, "-l", "gen in (old,during)", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), "-n", "kube-system", "rollout", "restart", "deployment/coredns"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(t.Context(), "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	err = realnode.Poll(t.Context(), 3*time.Minute, time.Second, "the drained blocks to be released", func() (bool, string, error) {
		var left []string
		for _, b := range nodeBlocks(t, c, node2) {
			if drained[b] {
				left = append(left, b)
			}
		}
		return len(left) == 0, fmt.Sprintf("still assigned: %v, holding %v", left, podsIn(t, c, left)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nodeIPAM is what the tests read of a NodeIPAM.
type nodeIPAM struct {
	Spec struct {
		Blocks []struct {
			CIDR string `json:"cidr"`
		} `json:"blocks"`
		Releases []struct {
			CIDR  string `json:"cidr"`
			State string `json:"state"`
			Drain bool   `json:"drain"`
		} `json:"releases"`
	} `json:"spec"`
}

// nodeBlocks lists the blocks of a node's NodeIPAM spec.
func nodeBlocks(tb testing.TB, c *realnode.Cluster, node string) []string {
	tb.Helper()
	var ipam nodeIPAM
	if err := c.GetJSON(tb.Context(), &ipam, "nodeipam", node); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, b := range ipam.Spec.Blocks {
		out = append(out, b.CIDR)
	}
	return out
}

// checkPodsInTheirBlocks fails tb when a running pod's address is in no
// block its node holds (assigned in its NodeIPAM's spec, or reported by its
// agent in status as still in use: a predecessor's block after the Node was
// re-created), or in a block assigned to another node: the operator took a
// block in use back.
func checkPodsInTheirBlocks(tb testing.TB, c *realnode.Cluster) {
	var list struct {
		Items []pod `json:"items"`
	}
	if err := c.GetJSON(context.Background(), &list, "pods", "-A"); err != nil {
		return // the API server is busy; the next turn checks
	}
	var ipams struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			nodeIPAM
			Status struct {
				Blocks []struct {
					CIDR string `json:"cidr"`
				} `json:"blocks"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.GetJSON(context.Background(), &ipams, "nodeipams"); err != nil {
		return
	}
	held := map[string][]string{}     // node → blocks it holds
	assigned := map[string][]string{} // node → blocks of its spec
	for _, n := range ipams.Items {
		for _, b := range n.Spec.Blocks {
			held[n.Metadata.Name] = append(held[n.Metadata.Name], b.CIDR)
			assigned[n.Metadata.Name] = append(assigned[n.Metadata.Name], b.CIDR)
		}
		for _, b := range n.Status.Blocks {
			held[n.Metadata.Name] = append(held[n.Metadata.Name], b.CIDR)
		}
	}
	in := func(ip string, blocks []string) bool {
		for _, b := range blocks {
			if block, err := netip.ParsePrefix(b); err == nil {
				if a, err := netip.ParseAddr(ip); err == nil && block.Contains(a) {
					return true
				}
			}
		}
		return false
	}
	for _, p := range list.Items {
		if p.Status.Phase != "Running" || p.Spec.NodeName == "" || p.Metadata.DeletionTimestamp != nil {
			continue // a terminating pod may have lost its network already
		}
		for _, a := range p.Status.PodIPs {
			if !inPool(a.IP) {
				continue
			}
			who := p.Metadata.Namespace + "/" + p.Metadata.Name
			if !in(a.IP, held[p.Spec.NodeName]) {
				tb.Errorf("pod %s holds %s, in no block %s holds %v: a block in use was taken back", who, a.IP, p.Spec.NodeName, held[p.Spec.NodeName])
			}
			for node, blocks := range assigned {
				if node != p.Spec.NodeName && in(a.IP, blocks) {
					tb.Errorf("pod %s on %s holds %s, in a block assigned to %s %v", who, p.Spec.NodeName, a.IP, node, blocks)
				}
			}
		}
	}
}

// podsIn lists the pods with an address in one of blocks.
func podsIn(tb testing.TB, c *realnode.Cluster, blocks []string) []string {
	tb.Helper()
	var list struct {
		Items []pod `json:"items"`
	}
	if err := c.GetJSON(tb.Context(), &list, "pods", "-A"); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		for _, a := range p.Status.PodIPs {
			for _, b := range blocks {
				if inPrefix(a.IP, b) {
					out = append(out, p.Metadata.Namespace+"/"+p.Metadata.Name)
				}
			}
		}
	}
	return out
}

func inPrefix(ip, prefix string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	p, err := netip.ParsePrefix(prefix)
	return err == nil && p.Contains(a)
}
