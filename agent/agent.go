package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
)

// Defaults for Config.
const (
	DefaultStateDir    = "/var/lib/lockstep"
	DefaultMetricsAddr = "127.0.0.1:9962"
	DefaultBPFRoot     = "/sys/fs/bpf/lockstep"
)

// ResyncInterval is how often the agent re-applies the committed state to
// the dataplane to repair drift, even when nothing changed.
const ResyncInterval = 5 * time.Minute

// Config configures the agent.
type Config struct {
	// Standalone runs without a Kubernetes API server: the pools are
	// Pools and the policy source is Manifests. Otherwise the agent runs
	// in Kubernetes mode: pods, namespaces, policies and nodes come from
	// the API server, the pools from the node's NodeIPAM blocks.
	Standalone bool
	// Pools are the address pools of standalone mode; Kubernetes mode
	// refuses them.
	Pools []netip.Prefix
	// NodeName is the Node the agent runs on (Kubernetes mode).
	NodeName string
	// Kubeconfig is a kubeconfig file to reach the API server with
	// (Kubernetes mode); empty means the pod's in-cluster config.
	Kubeconfig string
	StateDir   string
	Socket     string
	// MetricsAddr is the TCP address of /healthz, /readyz and /metrics
	// (":9962" listens on every address); empty disables the listener.
	MetricsAddr string
	// Manifests is a directory of Namespace, Pod and NetworkPolicy
	// manifests the agent enforces and follows (the standalone source;
	// Kubernetes mode refuses it).
	// Empty means no policy source: no pod is isolated, anti-spoofing
	// still applies.
	Manifests string
	// Dataplane is the policy backend: DataplaneEBPF (default),
	// DataplaneIptables or DataplaneHNS (Windows only).
	Dataplane string
	// HNSNetwork is the HNS network the hns dataplane programs
	// (DefaultHNSNetwork when empty).
	HNSNetwork string
	// BPFRoot is the bpffs directory the eBPF dataplane pins its maps
	// under; the other dataplanes clean it up if a previous agent left
	// maps there.
	BPFRoot string
	// Masquerade makes pod traffic to destinations outside the cluster's
	// pod CIDRs and NonMasqueradeCIDRs leave with the node's address
	// (agent/masquerade); false removes lockstep's masquerade rules.
	Masquerade bool
	// NonMasqueradeCIDRs are destinations outside the cluster that pods
	// reach with their own address: networks that route the pod CIDRs
	// back to the node.
	NonMasqueradeCIDRs []netip.Prefix
	// ClusterCIDRs add to the cluster's pod CIDRs, which are otherwise the
	// pools of every node (standalone: this node's).
	ClusterCIDRs []netip.Prefix
	// LeaveServicesToKubeProxy keeps the dataplane from translating pods'
	// connections to Services (the eBPF dataplane does by default, the
	// iptables dataplane standalone): kube-proxy translates them after
	// the dataplane has judged them, so egress policy sees the ClusterIP,
	// not the backend (--service-translation=false).
	LeaveServicesToKubeProxy bool
	// KubeProxyMasqueradeMark is kube-proxy's masquerade mark, 1 << its
	// --iptables-masquerade-bit (0: the default bit, 14): the eBPF
	// dataplane sets it in the mark of a pod's connection it translates to
	// an external frontend (policy.ServiceEntry.External) and a backend on
	// another node, for kube-proxy's POSTROUTING rule to masquerade it
	// (--kube-proxy-masquerade-bit).
	KubeProxyMasqueradeMark uint32
	// NodePortAddresses chooses the node's addresses on which the eBPF
	// dataplane translates pods' connections to NodePorts among its Node's
	// InternalIPs, as kube-proxy's --nodeport-addresses chooses where it
	// serves them; the zero value chooses all (--nodeport-addresses).
	NodePortAddresses enforcer.NodePorts
	// HostRouting lets the eBPF dataplane route the packets of TCP
	// connections between local pods and other nodes' pods itself, past
	// the node's netfilter and routing, both ways (bpf/lib/route.h), out
	// of and in from Uplinks (--host-routing). False detaches it from
	// every device.
	HostRouting bool
	// Uplinks names the devices host routing uses; empty: every Ethernet
	// device that is up, not a pod's, with a global unicast address
	// (datapath.DefaultUplinks), as found when the agent starts.
	Uplinks []string
	// SkipSysctls leaves IP forwarding alone (for tests that run the agent
	// in-process on the machine's own namespace).
	SkipSysctls bool
	Logger      *slog.Logger
	// Ready, when set, is called once the agent serves ADDs.
	Ready func()
}

// Run runs the agent until ctx ends, then shuts down cleanly: it stops
// accepting requests, lets in-flight ones finish (bounded), and closes the
// state file.
//
// It does not start on a state file it cannot trust (empty, truncated,
// corrupt, another program's, of another schema, or not writable: see
// persist.Open), and it stops with an error once a commit to the state
// file has failed, rather than serve from memory the file disagrees with.
//
// In Kubernetes mode the API socket opens early and answers "starting"
// (CNI STATUS code 50, ADD code 11) while the agent waits, in order, for
// the API server's first complete list of pods, namespaces and policies,
// and for the node's NodeIPAM blocks; it serves ADDs once both are in and
// the restored endpoints are enforced.
//
// Run is the start's phases in order, each a method of the node it builds
// (node.go), then the wait while the agent serves; the node's shutdown
// takes down what the phases built, in reverse order, however far they
// got.
func Run(ctx context.Context, cfg Config) error {
	n, err := newNode(cfg)
	if err != nil {
		return err
	}
	defer n.shutdown()
	n.runCtx, n.stopLoops = context.WithCancel(ctx)
	for _, phase := range []func(context.Context) error{
		n.serveProbes,   // /healthz, /readyz and /metrics answer from here on
		n.openStateFile, // refuse a state file that cannot be trusted
		n.startMode,     // the policy source: manifests, or the API server's lists
		n.openDataplane, // load the backend, clean up the ones not in use
		n.restore,       // the endpoint service, and the restored endpoints enforced
		n.runLoops,      // resync, compaction, clean-ups, masquerade, the source's
		n.awaitPools,    // Kubernetes mode: the node's NodeIPAM blocks
		n.serve,         // open the gate, serve the socket, enable forwarding
	} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	err = serveUntilStopped(ctx, n.errc, n.db, n.log)
	n.ops.shuttingDown()
	return err
}

// stateFile is what the serving agent watches of its state file.
type stateFile interface {
	Failed() <-chan struct{}
	Err() error
}

// untilFailed is wait, cut short with the state file's error once a commit
// to it fails: a start-up wait that needs writes would otherwise never
// end.
func untilFailed(db stateFile, wait func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-db.Failed():
				cancel()
			case <-ctx.Done():
			}
		}()
		err := wait(ctx)
		if dbErr := db.Err(); dbErr != nil {
			return fmt.Errorf("stop starting: %w", dbErr)
		}
		return err
	}
}

// serveUntilStopped blocks while the agent serves: until ctx ends (a clean
// stop, nil), a server fails, or a commit to the state file fails. The
// last is fatal: the file may then hold a change the store never made
// visible, the file takes no more writes, and only a restart, which
// reloads the file, makes the two agree again.
func serveUntilStopped(ctx context.Context, errc <-chan error, db stateFile, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return nil
	case err := <-errc:
		if err == nil {
			err = errors.New("API server stopped")
		}
		log.Error("server stopped", "err", err)
		return err
	case <-db.Failed():
		err := fmt.Errorf("stop serving: %w", db.Err())
		log.Error("state file failed", "err", err)
		return err
	}
}

// startCancelled is the result of a start-up wait that ended with err: a
// clean stop when ctx ended (the agent was told to stop while starting),
// err otherwise.
func startCancelled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// enableForwarding turns on IP forwarding in the agent's network namespace
// (the node's): pods reach each other and the world through it.
func enableForwarding(pools []netip.Prefix) error {
	keys := []string{"net/ipv4/ip_forward"}
	for _, p := range pools {
		if p.Addr().Is6() {
			keys = append(keys, "net/ipv6/conf/all/forwarding")
			break
		}
	}
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable forwarding (%s): %w", k, err)
		}
	}
	return nil
}
