//go:build linux

package twonode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/kubetest"
)

// Namespace prefixes, so SweepStale can find what a killed run left.
const (
	nodePrefix = "lstwonode"
	podPrefix  = "lstwopod"
)

// repoRoot is the repository, relative to this package.
const repoRoot = "../.."

// cluster is the API server and the simulated nodes.
type cluster struct {
	t     testing.TB
	env   *kubetest.Env
	bin   string
	nodes []*node
	// agentKubeconfig and operatorKubeconfig authenticate as the service
	// accounts of deploy/rbac.yaml.
	agentKubeconfig, operatorKubeconfig string
}

// podCIDR is the IPPool's range.
const podCIDR = "10.244.0.0/16"

// node is one simulated node.
type node struct {
	name string
	ip   netip.Prefix // on the link between the nodes
	uid  string
	// blocks are what the operator assigned in the node's NodeIPAM.
	blocks []netip.Prefix
	sim    *nodesim.Node
}

// owns reports whether addr lies in one of n's blocks.
func (n *node) owns(addr netip.Addr) bool {
	for _, b := range n.blocks {
		if b.Contains(addr) {
			return true
		}
	}
	return false
}

// pod is a pod wired through a node's CNI plugin.
type pod struct {
	name   string
	node   *node
	netns  ns.NetNS
	ip     netip.Addr
	labels map[string]string
}

// built is the lockstep binary the tests share, built once.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// builtBinary builds bin/lockstep and the lockstep-cni link into a
// temporary directory that TestMain removes.
func builtBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		t.Logf("building lockstep")
		if built.dir, built.err = os.MkdirTemp("", "lockstep-twonode-bin-"); built.err == nil {
			built.err = nodesim.BuildBinary(repoRoot, built.dir)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// newCluster starts the API server with lockstep's CRDs and an IPPool of
// podCIDR in /26 blocks, and builds the lockstep binary. Everything is
// undone when t ends, failed or not.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterWithBlocks(t, 26)
}

// newClusterWithBlocks is newCluster with the IPPool's blocks of the given
// prefix length.
func newClusterWithBlocks(t testing.TB, blockSize int) *cluster {
	t.Helper()
	env := kubetest.Start(t)
	for _, p := range []string{nodePrefix, podPrefix} {
		_, _ = nodesim.SweepStale(p)
	}
	c := &cluster{t: t, env: env, bin: builtBinary(t)}
	c.kubectl(nil, "apply", "-f", filepath.Join(repoRoot, "deploy", "crds"))
	c.kubectl(nil, "wait", "--for", "condition=established", "--timeout=60s", "crd/nodeipams.lockstep.dev", "crd/ippools.lockstep.dev")
	c.apply(fmt.Sprintf(`{"apiVersion":"lockstep.dev/v1alpha1","kind":"IPPool","metadata":{"name":"default"},"spec":{"cidrs":[%q],"blockSize":%d}}`, podCIDR, blockSize))
	// Agents and operator run as the service accounts deploy/rbac.yaml
	// gives them, so what they read and write must be what it allows.
	c.kubectl(nil, "apply", "-f", filepath.Join(repoRoot, "deploy", "rbac.yaml"))
	c.agentKubeconfig = c.serviceAccountKubeconfig("lockstep-agent")
	c.operatorKubeconfig = c.serviceAccountKubeconfig("lockstep-operator")
	return c
}

// serviceAccountKubeconfig writes a kubeconfig for the API server that
// authenticates as the kube-system service account sa, with a token the
// API server issues for it.
func (c *cluster) serviceAccountKubeconfig(sa string) string {
	c.t.Helper()
	token := strings.TrimSpace(string(c.kubectl(nil, "create", "token", sa, "-n", "kube-system", "--duration=2h")))
	const tmpl = `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s
  context:
    cluster: kubetest
    user: %s
current-context: %s
`
	path := filepath.Join(c.t.TempDir(), sa+".kubeconfig")
	if err := os.WriteFile(path, fmt.Appendf(nil, tmpl, c.env.Host, c.env.CAFile, sa, token, sa, sa, sa), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// addNode creates n's Node object with its InternalIP and n's namespace,
// whose agent reaches the API server through a relay; StartAgent starts
// the agent.
func (c *cluster) addNode(n *node) {
	t := c.t
	t.Helper()
	c.apply(fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":%q,"labels":{"kubernetes.io/hostname":%q}}}`, n.name, n.name))
	c.kubectl(nil, "patch", "node", n.name, "--subresource=status", "--type=merge", "-p",
		fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}]}}`, n.ip.Addr(), n.name))
	n.uid = strings.TrimSpace(string(c.kubectl(nil, "get", "node", n.name, "-o", "jsonpath={.metadata.uid}")))

	sim, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix: nodePrefix, BinDir: c.bin, WorkDir: filepath.Join(t.TempDir(), n.name), Kubernetes: true,
		AgentArgs: []string{"--node-name", n.name, "--kubeconfig", c.agentKubeconfig},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.sim = sim
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TWONODE_LOGS") != "" {
			t.Logf("agent log of %s:\n%s", n.name, sim.AgentLog())
		}
		if err := sim.Close(); err != nil {
			t.Errorf("close node %s: %v", n.name, err)
		}
	})
	// The kubeconfig names 127.0.0.1:port: inside the node that is the
	// relay to the API server.
	u, err := url.Parse(c.env.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay(t, sim.NS, u.Host)
	c.nodes = append(c.nodes, n)
}

// waitBlocks waits until the operator has given n a NodeIPAM it controls
// (owner reference to n's UID) with at least one block, and returns the
// blocks.
func (c *cluster) waitBlocks(n *node) []netip.Prefix {
	c.t.Helper()
	var blocks []netip.Prefix
	eventually(c.t, "the operator assigns "+n.name+" a block", func() (bool, string) {
		out, err := c.env.Kubectl(c.t.Context(), nil, "get", "nodeipam", n.name, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var obj struct {
			Metadata struct {
				OwnerReferences []struct {
					UID        string `json:"uid"`
					Controller bool   `json:"controller"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
			Spec struct {
				Blocks []struct {
					CIDR string `json:"cidr"`
				} `json:"blocks"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(out, &obj); err != nil {
			return false, err.Error()
		}
		if len(obj.Metadata.OwnerReferences) != 1 || obj.Metadata.OwnerReferences[0].UID != n.uid || !obj.Metadata.OwnerReferences[0].Controller {
			return false, fmt.Sprintf("owner references %+v, want the controller Node %s", obj.Metadata.OwnerReferences, n.uid)
		}
		blocks = nil
		for _, b := range obj.Spec.Blocks {
			p, err := netip.ParsePrefix(b.CIDR)
			if err != nil {
				return false, err.Error()
			}
			blocks = append(blocks, p)
		}
		return len(blocks) > 0, fmt.Sprintf("blocks %v", blocks)
	})
	return blocks
}

// startOperator runs `lockstep operator` against the API server until t
// ends, with args appended to its command line; it gives each Node a
// NodeIPAM with blocks of the pool. It is forked from a thread of its own that stays locked until the
// operator is reaped, so the parent-death signal stops it with a test
// binary that dies without cleanups.
func (c *cluster) startOperator(args ...string) {
	t, bin, kubeconfig := c.t, filepath.Join(c.bin, "lockstep"), c.operatorKubeconfig
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// Its probes on a free loopback port: the default, every address's
	// :9963, is the machine's, and another test's operator may hold it.
	cmd := exec.Command(bin, append([]string{"operator", "--kubeconfig", kubeconfig, "--leader-elect=false", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime retires the thread
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
			close(done)
		}
	}()
	if err := <-started; err != nil {
		t.Fatalf("start operator: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", b)
		}
	})
}

// kubectl runs kubectl and fails the test on error.
func (c *cluster) kubectl(stdin []byte, args ...string) []byte {
	c.t.Helper()
	out, err := c.env.Kubectl(c.t.Context(), stdin, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// apply creates or updates the object manifest describes.
func (c *cluster) apply(manifest string) {
	c.t.Helper()
	c.kubectl([]byte(manifest), "apply", "-f", "-")
}

// addPod does what the scheduler and a kubelet do for a pod on n: the Pod
// object bound to n, the CNI ADD in a fresh network namespace, then
// status.podIPs.
func (c *cluster) addPod(n *node, namespace, name string, labels map[string]string, ports string) *pod {
	c.t.Helper()
	t := c.t
	lb, _ := json.Marshal(labels)
	c.apply(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"labels":%s},
		"spec":{"nodeName":%q,"containers":[{"name":"c","image":"registry.invalid/test:1","ports":%s}]}}`,
		name, namespace, lb, n.name, ports))
	netns, err := nodesim.Create(nodesim.Name(podPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.Delete(netns) })
	rt := nodesim.Runtime("ctr-"+name, netns, "eth0", namespace, name)
	res, err := n.sim.Add(t.Context(), rt)
	if err != nil {
		t.Fatalf("CNI ADD of %s/%s on %s: %v", namespace, name, n.name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.sim.Del(ctx, rt); err != nil {
			t.Errorf("CNI DEL of %s/%s: %v", namespace, name, err)
		}
	})
	r, err := types100.GetResult(res)
	if err != nil || len(r.IPs) == 0 {
		t.Fatalf("CNI ADD of %s/%s: result %v without addresses (%v)", namespace, name, res, err)
	}
	ip, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	p := &pod{name: name, node: n, netns: netns, ip: ip.Unmap(), labels: labels}
	c.kubectl(nil, "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p",
		fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}]}}`, p.ip, p.ip))
	return p
}

// linkNodes joins two node namespaces with a veth pair, "uplink" on
// both sides, holding each node's address.
func linkNodes(t testing.TB, a, b *node) {
	t.Helper()
	err := a.sim.NS.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink"}, PeerName: "uplink-b"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		peer, err := netlink.LinkByName("uplink-b")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(b.sim.NS.Fd())); err != nil {
			return fmt.Errorf("move veth peer to %s: %w", b.name, err)
		}
		return upWithAddr("uplink", a.ip)
	})
	if err != nil {
		t.Fatalf("link %s: %v", a.name, err)
	}
	err = b.sim.NS.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("uplink-b")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(link, "uplink"); err != nil {
			return err
		}
		return upWithAddr("uplink", b.ip)
	})
	if err != nil {
		t.Fatalf("link %s: %v", b.name, err)
	}
}

func upWithAddr(name string, addr netip.Prefix) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}}
	if addr.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %s to %s: %w", addr, name, err)
	}
	return netlink.LinkSetUp(link)
}

// relay listens on addr inside netns and joins every connection to the
// same address in the test's own namespace, where the API server listens.
// Bytes pass unchanged, TLS included. It stops, cutting its connections,
// when t ends.
func relay(t testing.TB, netns ns.NetNS, addr string) {
	t.Helper()
	var lis net.Listener
	err := netns.Do(func(ns.NetNS) error {
		var err error
		lis, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("relay %s into the node: %v", addr, err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			c.Close()
			return false
		}
		conns[c] = true
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			if !track(in) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := net.Dial("tcp", addr)
				if err != nil {
					in.Close()
					return
				}
				if !track(out) {
					in.Close()
					return
				}
				pipe(in, out)
			}()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// listenTCP serves port inside p: accept and close.
func listenTCP(t testing.TB, p *pod, port int) {
	t.Helper()
	var lis net.Listener
	err := p.netns.Do(func(ns.NetNS) error {
		var err error
		lis, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { lis.Close(); <-done })
}

// connect reports whether a TCP connection from inside src to dst:port
// is established within timeout. A refusal or a timeout is false; an
// error that says nothing about the network fails the test.
func connect(t testing.TB, src *pod, dst netip.Addr, port int, timeout time.Duration) bool {
	t.Helper()
	var ok bool
	err := src.netns.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dst, uint16(port)).String(), timeout)
		if err == nil {
			c.Close()
			ok = true
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EHOSTUNREACH) ||
			errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ECONNRESET) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatalf("connect from %s to %s:%d: %v", src.name, dst, port, err)
	}
	return ok
}

// eventually polls cond until it holds or the deadline passes, and then
// fails with cond's last word. The deadline bounds convergence across the
// API server, two agents and their dataplanes; it is not what is tested.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not so after 60s: %s", what, detail)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// inNS runs fn inside netns and returns its result; its error fails t.
func inNS[T any](t testing.TB, netns ns.NetNS, fn func() (T, error)) T {
	t.Helper()
	var out T
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		out, err = fn()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
