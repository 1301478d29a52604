//go:build linux

package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
	"lockstep.dev/lockstep/test/testenv"
)

// The tests of this package share one cluster: two nodes, lockstep
// installed from deploy/ with the eBPF dataplane. The first test that needs
// it brings it up (about a minute with the binaries built); TestMain takes
// it down after the last. It replaces a cluster `make e2e-up` left running:
// there is one per machine.
var shared struct {
	once sync.Once
	c    *realnode.Cluster
	repo string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		dir := shared.c.Dir
		if err := realnode.Down(shared.c.Name, dir, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
			fmt.Fprintln(os.Stderr, "take the test cluster down:", err)
			code = 1
		}
		if left := realnode.Leftovers(shared.c.Name, dir); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "the test cluster left on the machine:\n%s\n", strings.Join(left, "\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// resetShared forgets the shared cluster (a test took it down): the next
// test that needs it brings it up again.
func resetShared() {
	shared.once = sync.Once{}
	shared.c, shared.err = nil, nil
}

// cluster returns the shared cluster, bringing it up on first use; it
// skips tb unless privileged tests are on.
func cluster(tb testing.TB) *realnode.Cluster {
	tb.Helper()
	testenv.Privileged(tb)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		logf := func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, "%s "+f+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
		}
		repo, err := realnode.RepoRoot()
		if err != nil {
			shared.err = err
			return
		}
		shared.repo = repo
		kubeBin, err := kubetest.BinDir(ctx, logf)
		if err != nil {
			shared.err = err
			return
		}
		initBin, err := buildInit(ctx, repo)
		if err != nil {
			shared.err = err
			return
		}
		images, err := realnode.BuildImages(ctx, realnode.ImageOptions{Repo: repo, KubeBinDir: kubeBin, Logf: logf})
		if err != nil {
			shared.err = err
			return
		}
		c, err := realnode.Up(ctx, realnode.Options{Name: realnode.NameFromEnv(), KubeBinDir: kubeBin, InitBinary: initBin, Images: images, Logf: logf})
		if err != nil {
			shared.err = err
			return
		}
		shared.c = c
		shared.err = c.InstallLockstep(ctx, repo, "ebpf")
	})
	if shared.err != nil {
		tb.Fatalf("real-node cluster: %v", shared.err)
	}
	return shared.c
}

// buildInit builds the harness command whose init subcommand is every
// host's PID 1.
func buildInit(ctx context.Context, repo string) (string, error) {
	out := repo + "/bin/e2e"
	if b, err := goBuild(ctx, repo, out, "./tools/e2e"); err != nil {
		return "", fmt.Errorf("build tools/e2e: %w\n%s", err, b)
	}
	return out, nil
}

// pod is what the tests read of a Pod.
type pod struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		UID       string            `json:"uid"`
		Labels    map[string]string `json:"labels"`
		// DeletionTimestamp is set once the pod is terminating: its
		// status keeps its addresses while the kubelet tears its
		// network down.
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase  string `json:"phase"`
		PodIP  string `json:"podIP"`
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string `json:"name"`
			Ready        bool   `json:"ready"`
			RestartCount int    `json:"restartCount"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func (p pod) restarts() int {
	n := 0
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// ip returns the pod's address of a family ("4" or "6"), or "".
func (p pod) ip(family string) string {
	for _, a := range p.Status.PodIPs {
		if strings.Contains(a.IP, ":") == (family == "6") {
			return a.IP
		}
	}
	return ""
}

func getPod(tb testing.TB, c *realnode.Cluster, ns, name string) pod {
	tb.Helper()
	var p pod
	if err := c.GetJSON(tb.Context(), &p, "pod", "-n", ns, name); err != nil {
		tb.Fatal(err)
	}
	return p
}

// apply applies manifests (YAML) and fails tb on error.
func apply(tb testing.TB, c *realnode.Cluster, manifests string) {
	tb.Helper()
	if out, err := c.KubectlIn(tb.Context(), manifests, "apply", "-f", "-"); err != nil {
		tb.Fatalf("apply: %v\n%s", err, out)
	}
}

// namespace creates a namespace for one test (with its labels) and deletes
// it when the test ends.
func namespace(tb testing.TB, c *realnode.Cluster, name string, labels map[string]string) {
	tb.Helper()
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": labels}})
	apply(tb, c, string(b))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := c.Kubectl(ctx, "delete", "namespace", name, "--wait=true", "--timeout=90s"); err != nil {
			tb.Logf("delete namespace %s: %v", name, err)
		}
	})
}

// waitReady waits until every named pod of ns is Ready and returns them.
func waitReady(tb testing.TB, c *realnode.Cluster, ns string, names ...string) map[string]pod {
	tb.Helper()
	out := map[string]pod{}
	err := realnode.Poll(tb.Context(), 3*time.Minute, time.Second, fmt.Sprintf("pods %v of %s to be Ready", names, ns), func() (bool, string, error) {
		var notReady []string
		for _, n := range names {
			var p pod
			if err := c.GetJSON(tb.Context(), &p, "pod", "-n", ns, n); err != nil {
				notReady = append(notReady, n+": "+err.Error())
				continue
			}
			out[n] = p
			if !p.ready() {
				notReady = append(notReady, n+": "+p.Status.Phase)
			}
		}
		return len(notReady) == 0, strings.Join(notReady, ", "), nil
	})
	if err != nil {
		events, _ := c.Kubectl(tb.Context(), "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
		tb.Fatalf("%v\nevents:\n%s", err, events)
	}
	return out
}

// connect runs agnhost connect in a pod (which must run the agnhost image)
// and reports whether a TCP (or UDP, SCTP) connection to addr succeeded.
func connect(tb testing.TB, c *realnode.Cluster, ns, from, addr, proto string) bool {
	tb.Helper()
	_, err := c.Kubectl(tb.Context(), "exec", "-n", ns, from, "--", "/agnhost", "connect", addr,
		"--timeout=3s", "--protocol="+proto)
	return err == nil
}

// connectOutcome is connect's answer in agnhost's words: "" when the
// connection succeeded, else the first word agnhost printed (TIMEOUT,
// REFUSED, OTHER, DNS), or kubectl's error.
func connectOutcome(tb testing.TB, c *realnode.Cluster, ns, from, addr, proto string) string {
	tb.Helper()
	_, err := c.Kubectl(tb.Context(), "exec", "-n", ns, from, "--", "/agnhost", "connect", addr,
		"--timeout=3s", "--protocol="+proto)
	if err == nil {
		return ""
	}
	for _, word := range []string{"TIMEOUT", "REFUSED", "OTHER", "DNS"} {
		if strings.Contains(err.Error(), word) {
			return word
		}
	}
	return err.Error()
}

// agnhostPod renders a Pod running agnhost netexec (HTTP and UDP on 8080,
// SCTP off) on a node, with labels.
func agnhostPod(ns, name, node string, labels map[string]string) string {
	return agnhostPodOnPort(ns, name, node, labels, 8080)
}

// agnhostPodOnPort is agnhostPod listening on port instead, its container
// port still named http.
func agnhostPodOnPort(ns, name, node string, labels map[string]string, port int) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec": map[string]any{
			"nodeName":                      node,
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "agnhost", "image": realnode.AgnhostImage, "imagePullPolicy": "IfNotPresent",
				"args":  []string{"netexec", fmt.Sprintf("--http-port=%d", port), fmt.Sprintf("--udp-port=%d", port)},
				"ports": []any{map[string]any{"name": "http", "containerPort": port}},
			}},
		},
	})
	return string(b)
}

// goBuild builds pkg of the repository into out.
func goBuild(ctx context.Context, repo, out, pkg string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.CombinedOutput()
}

// outsideServer is a TCP server on the host outside the cluster that
// remembers who connected last.
type outsideServer struct {
	port int
	mu   sync.Mutex
	peer netip.Addr
}

func (s *outsideServer) lastPeer() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peer
}

// listenOutside starts an outsideServer on both of the outside host's
// addresses, for the life of tb.
func listenOutside(tb testing.TB, c *realnode.Cluster) *outsideServer {
	tb.Helper()
	ext, err := ns.GetNS(nodesim.Path(c.OutsideNetns))
	if err != nil {
		tb.Fatal(err)
	}
	defer ext.Close()
	var lis net.Listener
	err = ext.Do(func(ns.NetNS) error {
		var err error
		lis, err = net.Listen("tcp", "[::]:0") // both families
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lis.Close() })
	s := &outsideServer{port: lis.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			ap, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
			s.mu.Lock()
			s.peer = ap.Addr().Unmap()
			s.mu.Unlock()
			conn.Close()
		}
	}()
	return s
}
