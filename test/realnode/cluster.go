//go:build linux

package realnode

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"lockstep.dev/lockstep/probe/nodesim"
)

// corednsManifest deploys the cluster DNS.
//
//go:embed coredns.yaml
var corednsManifest string

// Options configure Up.
type Options struct {
	// Name names the cluster (DefaultName when empty): a machine runs one
	// cluster per name. Up removes a previous cluster of the name first,
	// whatever state it is in.
	Name string
	// Dir is the cluster directory (DefaultDir(Name) when empty).
	Dir string
	// Nodes is the number of worker nodes (2 when zero).
	Nodes int
	// KubeBinDir holds the Kubernetes binaries; see
	// tools/kube-testenv/build.sh.
	KubeBinDir string
	// InitBinary is a program whose `init --spec FILE` runs RunInit:
	// the harness command tools/e2e.
	InitBinary string
	// Images are image archives imported into every node's containerd
	// before its kubelet starts.
	Images []string
	// Logf receives progress. Nil discards it.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	Layout
	// Kubeconfig is an admin kubeconfig that reaches the API server from
	// the machine (through the relay on 127.0.0.1).
	Kubeconfig string
	// KubectlPath is the kubectl binary of the cluster's release.
	KubectlPath string

	logf func(string, ...any)
}

// state is what cluster.json records for Open.
type state struct {
	Name       string `json:"name"`
	Nodes      int    `json:"nodes"`
	Kubeconfig string `json:"kubeconfig"`
	Kubectl    string `json:"kubectl"`
	RelayPort  int    `json:"relayPort"`
}

// Up brings up a cluster: the network, the control plane, then every node,
// and returns once every node's kubelet and kube-proxy run and the Node
// objects exist. The nodes stay NotReady until a CNI is installed. On error
// Up takes down what it brought up.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if !validName.MatchString(o.Name) {
		return nil, fmt.Errorf("bring up cluster: name %q: want 1 to 8 lower-case letters and digits", o.Name)
	}
	if o.Dir == "" {
		o.Dir = DefaultDir(o.Name)
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bring up cluster: run as root (it creates network, mount and PID namespaces)")
	}
	bin, err := findBinaries(o)
	if err != nil {
		return nil, err
	}
	if err := Down(o.Name, o.Dir, o.Logf); err != nil {
		return nil, fmt.Errorf("remove previous cluster: %w", err)
	}
	l := NewLayout(o.Name, o.Dir, o.Nodes)
	cl := &Cluster{Layout: l, Kubeconfig: l.kubeconfig(), KubectlPath: bin.kubeBin("kubectl"), logf: o.Logf}
	c = cl
	defer func() {
		if err != nil {
			o.Logf("realnode: bring-up failed; taking the cluster down")
			cl.dumpLogs(o.Logf)
			_ = Down(o.Name, o.Dir, o.Logf)
		}
	}()
	t0 := time.Now()
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.Dir, markerFile), nil, 0o644); err != nil {
		return nil, fmt.Errorf("mark cluster dir: %w", err)
	}
	bin, err = copyInit(l, bin)
	if err != nil {
		return nil, err
	}
	p, err := c.writePKI()
	if err != nil {
		return nil, err
	}
	if err := createNetwork(l); err != nil {
		return nil, fmt.Errorf("create network: %w", err)
	}

	// Control plane, with the relay kubectl reaches it through.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the API server relay: %w", err)
	}
	relayPort := lis.Addr().(*net.TCPAddr).Port
	if err := p.writeKubeconfig(c.Kubeconfig, "admin", fmt.Sprintf("https://127.0.0.1:%d", relayPort)); err != nil {
		lis.Close()
		return nil, err
	}
	lf, err := lis.(*net.TCPListener).File()
	lis.Close()
	if err != nil {
		return nil, fmt.Errorf("pass the relay listener: %w", err)
	}
	err = startHost(l.ControlPlane, controlPlaneSpec(l, p, bin), bin.init, lf)
	lf.Close()
	if err != nil {
		return nil, err
	}
	if err := waitHost(ctx, l.ControlPlane); err != nil {
		return nil, err
	}
	o.Logf("realnode: control plane up in %s (API server %s, kubeconfig %s)", time.Since(t0).Round(time.Millisecond), l.APIServerURL(), c.Kubeconfig)

	images, err := stageImages(l, o.Images)
	if err != nil {
		return nil, err
	}
	for _, h := range l.Nodes {
		if err := writeNodeFiles(l, h, p, bin); err != nil {
			return nil, err
		}
		if err := makeCgroups(h); err != nil {
			return nil, err
		}
		if err := startHost(h, nodeSpec(l, h, bin, images), bin.init, nil); err != nil {
			return nil, err
		}
	}
	for _, h := range l.Nodes {
		if err := waitHost(ctx, h); err != nil {
			return nil, err
		}
	}
	st := state{Name: o.Name, Nodes: o.Nodes, Kubeconfig: c.Kubeconfig, Kubectl: c.KubectlPath, RelayPort: relayPort}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(l.statePath(), b, 0o644); err != nil {
		return nil, fmt.Errorf("write cluster state: %w", err)
	}
	if err := c.waitNodesRegistered(ctx); err != nil {
		return nil, err
	}
	// The cluster DNS, as kubeadm installs it; its pods start once a CNI
	// is installed.
	if _, err := c.KubectlIn(ctx, corednsManifest, "apply", "-f", "-"); err != nil {
		return nil, fmt.Errorf("deploy CoreDNS: %w", err)
	}
	o.Logf("realnode: %d nodes registered in %s", len(l.Nodes), time.Since(t0).Round(time.Millisecond))
	return c, nil
}

// Open returns the cluster called name that Up left running in dir (the
// default directory when empty).
func Open(name, dir string, logf func(string, ...any)) (*Cluster, error) {
	if dir == "" {
		dir = DefaultDir(name)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b, err := os.ReadFile(NewLayout(name, dir, 0).statePath())
	if err != nil {
		return nil, fmt.Errorf("open cluster in %s: %w (bring one up with make e2e-up)", dir, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("open cluster in %s: %w", dir, err)
	}
	return &Cluster{Layout: NewLayout(st.Name, dir, st.Nodes), Kubeconfig: st.Kubeconfig, KubectlPath: st.Kubectl, logf: logf}, nil
}

// findBinaries finds every program the cluster runs, before anything
// starts: a missing one is a setup problem with a fix.
func findBinaries(o Options) (binaries, error) {
	b := binaries{kube: o.KubeBinDir, init: o.InitBinary, cniPlugins: "/usr/lib/cni"}
	if b.kube == "" {
		return b, errors.New("bring up cluster: no Kubernetes binaries directory (tools/kube-testenv/build.sh prints it)")
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(b.kubeBin(name)); err != nil {
			return b, fmt.Errorf("bring up cluster: %w (run tools/kube-testenv/build.sh)", err)
		}
	}
	if _, err := os.Stat(b.init); err != nil {
		return b, fmt.Errorf("bring up cluster: init binary: %w", err)
	}
	for _, p := range []struct {
		dst  *string
		name string
		pkg  string
	}{
		{&b.etcd, "etcd", "etcd-server"},
		{&b.containerd, "containerd", "containerd"},
		{&b.ctr, "ctr", "containerd"},
	} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			return b, fmt.Errorf("bring up cluster: %s not found: run make deps (Debian package %s)", p.name, p.pkg)
		}
		*p.dst = path
	}
	for _, name := range []string{"runc", "nsenter", "unshare", "iptables"} {
		if _, err := exec.LookPath(name); err != nil {
			return b, fmt.Errorf("bring up cluster: %s not found: run make deps", name)
		}
	}
	return b, nil
}

// copyInit copies the init binary into the cluster directory: a binary
// built by `go run` is deleted when the harness exits, while the hosts'
// inits keep running.
func copyInit(l Layout, b binaries) (binaries, error) {
	data, err := os.ReadFile(b.init)
	if err != nil {
		return b, fmt.Errorf("read init binary: %w", err)
	}
	dst := filepath.Join(l.binDir(), "e2e-init")
	if err := writeFile(dst, data, 0o755); err != nil {
		return b, err
	}
	b.init = dst
	return b, nil
}

// writePKI makes the cluster's identities, certificates and the
// kubeconfigs of the control plane's components.
func (c *Cluster) writePKI() (*pki, error) {
	ids := map[string]identity{
		"admin":              {user: "lockstep-e2e-admin", groups: []string{"system:masters"}},
		"controller-manager": {user: "system:kube-controller-manager"},
		"scheduler":          {user: "system:kube-scheduler"},
		"kube-proxy":         {user: "system:kube-proxy"},
	}
	for _, h := range c.Nodes {
		ids["node:"+h.Name] = identity{user: "system:node:" + h.Name, groups: []string{"system:nodes"}}
	}
	cp := c.ControlPlane
	names := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	ips := []net.IP{cp.IPv4.AsSlice(), cp.IPv6.AsSlice(), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1"), net.ParseIP("fd00:10:96::1")}
	p, err := newPKI(c.pkiDir(), names, ips, ids)
	if err != nil {
		return nil, err
	}
	for _, n := range []string{"controller-manager", "scheduler"} {
		if err := p.writeKubeconfig(p.kubeconfig(n), n, c.APIServerURL()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// startHost starts a host's init, detached from the harness: in the host's
// network namespace, as PID 1 of a new PID namespace, with new mount, UTS
// and IPC namespaces. relay, when not nil, becomes the init's descriptor 3.
func startHost(h Host, spec InitSpec, initBin string, relayListener *os.File) error {
	if err := os.MkdirAll(h.LogDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", h.LogDir(), err)
	}
	specPath := filepath.Join(h.Dir, "init.json")
	b, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return fmt.Errorf("write init spec of %s: %w", h.Name, err)
	}
	_ = os.Remove(spec.StatusFile)
	logf, err := os.OpenFile(filepath.Join(h.LogDir(), "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open init log of %s: %w", h.Name, err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+nodesim.Path(h.Netns), "--",
		"unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc", "--propagation", "private", "--mount-proc",
		initBin, "init", "--spec", specPath)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if relayListener != nil {
		cmd.ExtraFiles = []*os.File{relayListener}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start init of %s: %w", h.Name, err)
	}
	// Not waited for: it outlives the harness. Release it so the runtime
	// keeps no handle.
	return cmd.Process.Release()
}

// waitHost waits until a host's init has run every step, or says why not.
func waitHost(ctx context.Context, h Host) error {
	statusPath := filepath.Join(h.Dir, "status.json")
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var st InitStatus
		if b, err := os.ReadFile(statusPath); err == nil && json.Unmarshal(b, &st) == nil {
			if st.Error != "" {
				return fmt.Errorf("host %s: %s", h.Name, st.Error)
			}
			if st.Ready {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("host %s: not up after 5m (see %s)", h.Name, h.LogDir())
		}
		if len(initPIDs(h)) == 0 && time.Now().After(deadline.Add(-4*time.Minute)) {
			return fmt.Errorf("host %s: its init is not running (see %s)", h.Name, filepath.Join(h.LogDir(), "init.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dumpLogs reports the end of every log of every host, for a failed run.
func (c *Cluster) dumpLogs(logf func(string, ...any)) {
	for _, h := range c.Hosts() {
		entries, _ := os.ReadDir(h.LogDir())
		for _, e := range entries {
			logf("realnode: last lines of %s/%s:\n%s", h.Name, e.Name(), tail(filepath.Join(h.LogDir(), e.Name()), 15))
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// nodeCNIBinDir is where lockstep's DaemonSet installs the CNI plugin, and
// lockstep with it, on a node.
const nodeCNIBinDir = "/opt/cni/bin"

// Exec runs a command on a host, in all of its namespaces (as `kubectl
// debug node` would, minus the container), with the node's CNI binaries
// (lockstep among them) on the PATH, and returns its combined output.
func (c *Cluster) Exec(ctx context.Context, h Host, args ...string) ([]byte, error) {
	pids := initPIDs(h)
	if len(pids) != 1 {
		return nil, fmt.Errorf("exec on %s: want one init, found %d", h.Name, len(pids))
	}
	full := append([]string{"-t", strconv.Itoa(pids[0]), "-m", "-u", "-i", "-n", "-p", "--"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	// The node's /opt/cni/bin, where install-cni put lockstep, so that
	// `exec NODE -- lockstep status` runs the node's own binary.
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":"+nodeCNIBinDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("exec %q on %s: %w: %s", args, h.Name, err, out)
	}
	return out, nil
}

// Node returns the node called name.
func (c *Cluster) Node(name string) (Host, error) {
	for _, h := range c.Nodes {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("no node %q in the cluster", name)
}
