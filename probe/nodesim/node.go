//go:build linux

package nodesim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
)

// NodeOptions describes a simulated node.
type NodeOptions struct {
	// Prefix names the namespaces (PREFIX-PID-N).
	Prefix string
	// BinDir holds the lockstep binary and the lockstep-cni symlink; it is
	// also the first CNI_PATH entry.
	BinDir string
	// ExtraPluginDirs are appended to CNI_PATH (e.g. reference plugins).
	ExtraPluginDirs []string
	// Pools are the agent's --pool-cidr values.
	Pools []string
	// WorkDir holds the agent's state, socket, log and the libcni cache.
	WorkDir string
	// ConfList is the network config list ADD/DEL use; empty means the
	// lockstep default with the node's socket.
	ConfList []byte
	// Manifests, when set, is the agent's --manifests directory.
	Manifests string
	// AgentArgs are appended to the agent's command line (e.g.
	// "--dataplane", "iptables").
	AgentArgs []string
	// Kubernetes starts the agent in Kubernetes mode: no --standalone, no
	// Pools (they come from the node's NodeIPAM), and AgentArgs carry
	// --node-name and --kubeconfig.
	Kubernetes bool
}

// Node is a node network namespace with a lockstep agent in it.
type Node struct {
	NS       ns.NetNS
	Opts     NodeOptions
	StateDir string
	Socket   string
	LogPath  string
	// BPFRoot is a private bpffs mount the agent pins its maps under; Close
	// unmounts it, which frees every map the agent left pinned.
	BPFRoot string
	CNI     *libcni.CNIConfig
	Conf    *libcni.NetworkConfigList

	agent *exec.Cmd
	done  chan error
}

// NewNode creates the node namespace and the libcni client; call
// StartAgent to run the agent and Close to remove everything.
func NewNode(o NodeOptions) (*Node, error) {
	if o.Prefix == "" {
		o.Prefix = "lsnode"
	}
	if err := os.MkdirAll(o.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("create node work dir: %w", err)
	}
	n := &Node{
		Opts:     o,
		StateDir: filepath.Join(o.WorkDir, "state"),
		Socket:   filepath.Join(o.WorkDir, "lockstep.sock"),
		LogPath:  filepath.Join(o.WorkDir, "agent.log"),
		BPFRoot:  filepath.Join(o.WorkDir, "bpf"),
	}
	conf := o.ConfList
	if len(conf) == 0 {
		conf = []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"lockstep","plugins":[{"type":"lockstep-cni","socket":%q}]}`, n.Socket))
	}
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("parse network config list: %w", err)
	}
	n.Conf = list
	if err := MountBPF(n.BPFRoot); err != nil {
		return nil, err
	}
	var err2 error
	n.NS, err2 = Create(Name(o.Prefix))
	if err2 != nil {
		_ = UnmountBPF(n.BPFRoot)
		return nil, err2
	}
	paths := append([]string{o.BinDir}, o.ExtraPluginDirs...)
	n.CNI = libcni.NewCNIConfigWithCacheDir(paths, filepath.Join(o.WorkDir, "cni-cache"), &PluginExec{Node: n.NS})
	return n, nil
}

// StartAgent starts `lockstep agent` inside the node and waits until it
// answers on its socket.
func (n *Node) StartAgent(ctx context.Context) error {
	if n.agent != nil {
		return errors.New("start agent: already running")
	}
	args := []string{"agent", "--state-dir", n.StateDir, "--socket", n.Socket, "--metrics-addr", "", "--bpf-root", n.BPFRoot}
	// Generous bounds: on a busy 2-core machine, loading and verifying
	// the eBPF programs alone has taken over 10 s. They bound a hang;
	// they measure nothing.
	ready := 60 * time.Second
	if n.Opts.Kubernetes {
		// Ready only once the API server has listed everything and the
		// node's NodeIPAM has a block.
		ready = 90 * time.Second
	} else {
		args = append(args, "--standalone")
	}
	if n.Opts.Manifests != "" {
		args = append(args, "--manifests", n.Opts.Manifests)
	}
	for _, p := range n.Opts.Pools {
		args = append(args, "--pool-cidr", p)
	}
	args = append(args, n.Opts.AgentArgs...)
	logFile, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open agent log: %w", err)
	}
	cmd := exec.Command(filepath.Join(n.Opts.BinDir, "lockstep"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := Start(n.NS, cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("start agent: %w", err)
	}
	n.agent, n.done = cmd, make(chan error, 1)
	go func() { n.done <- cmd.Wait(); logFile.Close() }()

	client := api.NewClient(n.Socket, 500*time.Millisecond)
	deadline := time.Now().Add(ready)
	for {
		if _, err := client.Status(ctx); err == nil {
			return nil
		}
		select {
		case err := <-n.done:
			n.agent = nil
			return fmt.Errorf("agent exited during start-up (%v); log:\n%s", err, n.AgentLog())
		default:
		}
		if time.Now().After(deadline) {
			_ = n.KillAgent()
			return fmt.Errorf("agent did not answer on %s within %s; log:\n%s", n.Socket, ready, n.AgentLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// AgentLog returns what the agent has logged so far.
func (n *Node) AgentLog() string {
	b, _ := os.ReadFile(n.LogPath)
	return string(b)
}

// KillAgent SIGKILLs the agent and waits for it to be gone.
func (n *Node) KillAgent() error { return n.stopAgent(syscall.SIGKILL) }

// StopAgent SIGTERMs the agent and waits for a clean exit.
func (n *Node) StopAgent() error { return n.stopAgent(syscall.SIGTERM) }

func (n *Node) stopAgent(sig syscall.Signal) error {
	if n.agent == nil {
		return nil
	}
	_ = n.agent.Process.Signal(sig)
	var err error
	select {
	case err = <-n.done:
	case <-time.After(10 * time.Second):
		_ = n.agent.Process.Kill()
		err = <-n.done
	}
	n.agent = nil
	if sig == syscall.SIGKILL {
		return nil
	}
	return err
}

// Runtime returns the libcni runtime config for a pod attachment, with the
// Kubernetes CNI_ARGS a kubelet would pass.
func Runtime(containerID string, pod ns.NetNS, ifName, podNamespace, podName string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: containerID, NetNS: pod.Path(), IfName: ifName}
	if podName != "" {
		rt.Args = [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", podNamespace},
			{"K8S_POD_NAME", podName},
			{"K8S_POD_UID", "uid-" + containerID},
		}
	}
	return rt
}

// Add runs CNI ADD for the node's config list.
func (n *Node) Add(ctx context.Context, rt *libcni.RuntimeConf) (types.Result, error) {
	return n.CNI.AddNetworkList(ctx, n.Conf, rt)
}

// Del runs CNI DEL.
func (n *Node) Del(ctx context.Context, rt *libcni.RuntimeConf) error {
	return n.CNI.DelNetworkList(ctx, n.Conf, rt)
}

// Check runs CNI CHECK.
func (n *Node) Check(ctx context.Context, rt *libcni.RuntimeConf) error {
	return n.CNI.CheckNetworkList(ctx, n.Conf, rt)
}

// Status runs CNI STATUS.
func (n *Node) Status(ctx context.Context) error {
	return n.CNI.GetStatusNetworkList(ctx, n.Conf)
}

// GC runs CNI GC keeping the given attachments.
func (n *Node) GC(ctx context.Context, valid []types.GCAttachment) error {
	return n.CNI.GCNetworkList(ctx, n.Conf, &libcni.GCArgs{ValidAttachments: valid})
}

// Close stops the agent and deletes the node namespace (and with it every
// host-side link in it). The work dir is left for the caller.
func (n *Node) Close() error {
	errs := []error{n.KillAgent()}
	if n.NS != nil {
		errs = append(errs, Delete(n.NS))
	}
	errs = append(errs, UnmountBPF(n.BPFRoot))
	return errors.Join(errs...)
}

// BuildBinary builds the lockstep binary into dir and creates the
// lockstep-cni symlink, as `make build` does. moduleDir is the repository
// root.
func BuildBinary(moduleDir, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "lockstep"), "./cmd/lockstep")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build lockstep: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	link := filepath.Join(dir, "lockstep-cni")
	_ = os.Remove(link)
	if err := os.Symlink("lockstep", link); err != nil {
		return fmt.Errorf("link lockstep-cni: %w", err)
	}
	return nil
}
