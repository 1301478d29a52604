//go:build linux

package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// hostLinks lists lockstep's host-side links in the node namespace.
func hostLinks(t *testing.T, node ns.NetNS) []string {
	t.Helper()
	var names []string
	err := node.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, api.HostIfPrefix) {
				names = append(names, l.Attrs().Name)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

func podAddrs(t *testing.T, res types.Result) (v4, v6 netip.Addr) {
	t.Helper()
	for _, ip := range asResult(t, res).IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		a = a.Unmap()
		if a.Is4() {
			v4 = a
		} else {
			v6 = a
		}
	}
	return v4, v6
}

// TestPrivilegedCNILifecycle drives the built binary through the
// lockstep-cni symlink with libcni, as a container runtime would.
func TestPrivilegedCNILifecycle(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24", "fd00:10:244::/120"}})
	ctx := ctxT(t)
	podA, podB := newPod(t), newPod(t)
	rtA, rtB := podRuntime("ctr-a", podA), podRuntime("ctr-b", podB)

	resA, err := node.Add(ctx, rtA)
	if err != nil {
		t.Fatalf("ADD a: %v", err)
	}
	resB, err := node.Add(ctx, rtB)
	if err != nil {
		t.Fatalf("ADD b: %v", err)
	}
	r := asResult(t, resA)
	if r.CNIVersion != "1.1.0" || len(r.IPs) != 2 || len(r.Interfaces) != 2 || len(r.Routes) != 2 {
		t.Fatalf("ADD result incomplete: %s", mustJSON(r))
	}
	if r.Interfaces[1].Sandbox != podA.Path() || r.Interfaces[0].Name != api.HostIfName("ctr-a", "eth0") {
		t.Fatalf("ADD result interfaces: %s", mustJSON(r.Interfaces))
	}
	a4, a6 := podAddrs(t, resA)
	b4, b6 := podAddrs(t, resB)
	if !a4.IsValid() || !a6.IsValid() || a4 == b4 || a6 == b6 {
		t.Fatalf("pod addresses a=%s,%s b=%s,%s", a4, a6, b4, b6)
	}

	if err := node.Check(ctx, rtA); err != nil {
		t.Fatalf("CHECK a: %v", err)
	}
	if err := node.Status(ctx); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	// Host <-> pod and pod <-> pod, both families.
	pings := []struct {
		name string
		from ns.NetNS
		to   netip.Addr
	}{
		{"node to a (v4)", node.NS, a4},
		{"node to a (v6)", node.NS, a6},
		{"a to node gateway", podA, netip.MustParseAddr("169.254.1.1")},
		{"a to b (v4)", podA, b4},
		{"b to a (v4)", podB, a4},
		{"a to b (v6)", podA, b6},
		{"b to a (v6)", podB, a6},
	}
	for _, p := range pings {
		if err := nodesim.Ping(p.from, p.to, 2*time.Second); err != nil {
			t.Errorf("ping %s: %v", p.name, err)
		}
	}

	// CHECK notices a pod whose address was removed behind our back.
	err = podA.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrDel(link, &netlink.Addr{IPNet: netlink.NewIPNet(a4.AsSlice())})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = node.Check(ctx, rtA)
	if err == nil || !strings.Contains(err.Error(), a4.String()) {
		t.Fatalf("CHECK after removing %s: %v", a4, err)
	}

	// DEL is idempotent: twice, for an unknown container, and with the
	// pod's netns already gone.
	for i := range 2 {
		if err := node.Del(ctx, rtA); err != nil {
			t.Fatalf("DEL a #%d: %v", i+1, err)
		}
	}
	if err := node.Del(ctx, podRuntime("never-added", podA)); err != nil {
		t.Fatalf("DEL of unknown container: %v", err)
	}
	if err := nodesim.Delete(podB); err != nil {
		t.Fatal(err)
	}
	gone := &libcni.RuntimeConf{ContainerID: rtB.ContainerID, NetNS: rtB.NetNS, IfName: "eth0", Args: rtB.Args}
	if err := node.Del(ctx, gone); err != nil {
		t.Fatalf("DEL with netns gone: %v", err)
	}
	if links := hostLinks(t, node.NS); len(links) != 0 {
		t.Fatalf("host links left after DEL: %v", links)
	}
	if _, err := api.NewClient(node.Socket, 0).Get(ctx, api.Attachment{ContainerID: "ctr-a", IfName: "eth0"}); err == nil {
		t.Fatal("agent still has ctr-a after DEL")
	}
}

// TestPrivilegedGC frees every attachment the runtime no longer lists,
// including its host-side link, and sweeps links a crashed ADD left.
func TestPrivilegedGC(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}})
	ctx := ctxT(t)
	var keep []types.GCAttachment
	for i, id := range []string{"keep-1", "drop-1", "keep-2", "drop-2"} {
		if _, err := node.Add(ctx, podRuntime(id, newPod(t))); err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		if i%2 == 0 {
			keep = append(keep, types.GCAttachment{ContainerID: id, IfName: "eth0"})
		}
	}
	// A stray link with lockstep's naming, as a crashed ADD would leave.
	stray := api.HostIfName("crashed", "eth0")
	err := node.NS.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: stray}, PeerName: "strayp"})
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := node.GC(ctx, keep); err != nil {
		t.Fatalf("GC: %v", err)
	}
	want := []string{api.HostIfName("keep-1", "eth0"), api.HostIfName("keep-2", "eth0")}
	slices.Sort(want)
	if got := hostLinks(t, node.NS); !slices.Equal(got, want) {
		t.Fatalf("host links after GC: %v, want %v", got, want)
	}
	st, err := api.NewClient(node.Socket, 0).Status(ctx)
	if err != nil || st.Pools[0].Used != 2 {
		t.Fatalf("pool after GC: %+v %v", st, err)
	}
}

// TestPrivilegedCNIErrors checks each failure carries its CNI code and says
// what to do.
func TestPrivilegedCNIErrors(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.9.0.0/30"}})
	ctx := ctxT(t)

	// Pool exhaustion names the pool.
	for _, id := range []string{"p1", "p2"} {
		if _, err := node.Add(ctx, podRuntime(id, newPod(t))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := node.Add(ctx, podRuntime("p3", newPod(t)))
	if cniCode(err) != api.CodePoolExhausted || !strings.Contains(err.Error(), "10.9.0.0/30") {
		t.Fatalf("exhausted pool: %v", err)
	}
	if err := node.Status(ctx); cniCode(err) != api.CodeNotAvailable {
		t.Fatalf("STATUS with a full pool: %v", err)
	}
	if links := len(hostLinks(t, node.NS)); links != 2 {
		t.Fatalf("%d host links after a failed ADD, want 2", links)
	}

	// Bad CNI_ARGS: code 4.
	bad := podRuntime("p4", newPod(t))
	bad.Args = [][2]string{{"K8S_POD_NAMESPACE", "Not_A_Namespace"}}
	if _, err := node.Add(ctx, bad); cniCode(err) != api.CodeInvalidEnv {
		t.Fatalf("bad CNI_ARGS: %v", err)
	}

	// Malformed config: code 7.
	badConf, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"lockstep","plugins":[{"type":"lockstep-cni","mtu":"big"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.CNI.AddNetworkList(ctx, badConf, podRuntime("p5", newPod(t))); cniCode(err) != api.CodeInvalidConfig {
		t.Fatalf("malformed config: %v", err)
	}

	// The node's own namespace is no pod sandbox: code 8, nothing wired.
	own := podRuntime("p7", newPod(t))
	own.NetNS = node.NS.Path()
	if _, err := node.Add(ctx, own); cniCode(err) != 8 || !strings.Contains(err.Error(), "node's own network namespace") {
		t.Fatalf("ADD into the node's own netns: %v", err)
	}
	// Nor is a file that is no namespace at all: the agent refuses the
	// descriptor the plugin passes, before it reserves anything.
	notNS := podRuntime("p8", newPod(t))
	notNS.NetNS = filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(notNS.NetNS, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Add(ctx, notNS); cniCode(err) != 8 || !strings.Contains(err.Error(), "not a namespace handle") {
		t.Fatalf("ADD into a regular file: %v", err)
	}
	if links := len(hostLinks(t, node.NS)); links != 2 {
		t.Fatalf("%d host links after refused ADDs, want 2", links)
	}

	// Agent gone: code 11 for ADD (once the plugin's wait for the agent
	// to come back ends) and 50 for STATUS.
	if err := node.StopAgent(); err != nil {
		t.Fatalf("agent did not stop cleanly on SIGTERM: %v", err)
	}
	if _, err := os.Stat(node.Socket); !os.IsNotExist(err) {
		t.Errorf("socket %s left after clean shutdown", node.Socket)
	}
	start := time.Now()
	_, err = node.Add(ctx, podRuntime("p6", newPod(t)))
	if cniCode(err) != api.CodeTryAgainLater || time.Since(start) > api.PluginTimeout+4*time.Second {
		t.Fatalf("ADD with agent down: %v after %s", err, time.Since(start))
	}
	if err := node.Status(ctx); cniCode(err) != api.CodeNotAvailable {
		t.Fatalf("STATUS with agent down: %v", err)
	}
	if links := len(hostLinks(t, node.NS)); links != 2 {
		t.Fatalf("%d host links after ADD with agent down, want 2", links)
	}
}

// TestPrivilegedPortmapChaining runs the reference portmap plugin after
// lockstep in one config list: it must receive lockstep's result as
// prevResult and program a DNAT to the pod.
func TestPrivilegedPortmapChaining(t *testing.T) {
	testenv.Privileged(t)
	const refDir = "/usr/lib/cni"
	if _, err := os.Stat(refDir + "/portmap"); err != nil {
		testenv.Missing(t, "the reference portmap plugin (containernetworking-plugins)", err)
	}
	work := t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"lockstep","plugins":[
		{"type":"lockstep-cni","socket":"` + work + `/lockstep.sock"},
		{"type":"portmap","capabilities":{"portMappings":true}}]}`
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}, WorkDir: work,
		ConfList: []byte(conf), ExtraPluginDirs: []string{refDir}})
	ctx := ctxT(t)
	rt := podRuntime("pm", newPod(t))
	rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}
	res, err := node.Add(ctx, rt)
	if err != nil {
		t.Fatalf("ADD through lockstep + portmap: %v", err)
	}
	v4, _ := podAddrs(t, res)
	var rules string
	err = node.NS.Do(func(ns.NetNS) error {
		out, err := runOutput("iptables-save", "-t", "nat")
		rules = out
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rules, v4.String()+":80") {
		t.Fatalf("portmap did not DNAT to %s:80:\n%s", v4, rules)
	}
	if err := node.Del(ctx, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

// hostFilters names the BPF filters on the host link hostIf, ingress and
// egress, in the node namespace.
func hostFilters(t *testing.T, node ns.NetNS, hostIf string) []string {
	t.Helper()
	var names []string
	err := node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(hostIf)
		if err != nil {
			return err
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			filters, err := netlink.FilterList(link, parent)
			if err != nil {
				return err
			}
			for _, f := range filters {
				if bf, ok := f.(*netlink.BpfFilter); ok {
					names = append(names, bf.Name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestPrivilegedCNIAddAgainIsEnforced: another ADD of the same attachment,
// right after its DEL or over it, makes the host link anew under the same
// name; the ADD answers only once the new link carries lockstep's
// programs (the agent's release of the DEL is still held back then).
func TestPrivilegedCNIAddAgainIsEnforced(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}})
	ctx := ctxT(t)
	pod := newPod(t)
	rt := podRuntime("ctr-again", pod)
	hostIf := api.HostIfName("ctr-again", "eth0")
	want := []string{"lockstep_from_pod", "lockstep_to_pod"}
	steps := []struct {
		name string
		del  bool
	}{
		{"first ADD", false},
		{"ADD again over it", false},
		{"DEL and ADD again", true},
		{"DEL and ADD again, twice", true},
	}
	for _, step := range steps {
		if step.del {
			if err := node.Del(ctx, rt); err != nil {
				t.Fatalf("%s: DEL: %v", step.name, err)
			}
		}
		if _, err := node.Add(ctx, rt); err != nil {
			t.Fatalf("%s: ADD: %v", step.name, err)
		}
		if got := hostFilters(t, node.NS, hostIf); !slices.Equal(got, want) {
			t.Errorf("%s: filters on %s: %q, want %q", step.name, hostIf, got, want)
		}
	}
}
