package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/agent"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/install"
	"lockstep.dev/lockstep/internal/buildinfo"
)

func runCLI(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lockstep:", err)
		return 1
	}
	return 0
}

// newRootCmd is the lockstep command and every subcommand under it.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "lockstep",
		Short:         "Kubernetes node networking with transactional state",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every subcommand's --output is checked here, before it does
		// anything, with one wording.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("output"); f != nil {
				return checkOutput(f.Value.String())
			}
			return nil
		},
	}
	root.AddCommand(agentCommand(), installCNICommand(), versionCommand(), newProbeCmd(), newMapsCmd(), newMonitorCmd(), newStatusCmd(), newExplainCmd(), newOperatorCmd(), newMountBPFFSCmd(), newUninstallCmd())
	return root
}

func versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the lockstep version, commit and build date",
		Long: `Print the lockstep version, the commit it was built from ("-dirty" when the
tree had uncommitted changes), the commit's date, the Go version and the
platform. A build in a git checkout reads the commit from the toolchain's
stamp; make passes them to the linker, for builds without .git.`,
		Example: "  lockstep version\n  lockstep version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Get()
			if output != outputTable {
				return writeStructured(cmd.OutOrStdout(), output, info)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), info)
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func agentCommand() *cobra.Command {
	var (
		cfg       agent.Config
		pools     []string
		logLevel  string
		logFormat string
	)
	var nonMasq, cluster []string // --non-masquerade-cidr, --cluster-cidr
	var translate bool            // --service-translation
	var masqBit int               // --kube-proxy-masquerade-bit
	var nodePorts []string        // --nodeport-addresses
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (serves the CNI plugin, owns all node state)",
		Long: `Run the node agent. It owns the node's IP pools, allocations and endpoints
in one transactional store, persists every allocation and release to
--state-dir before answering, and serves the lockstep-cni plugin on --socket.

In Kubernetes mode (the default) it follows the API server's pods,
namespaces, network policies and nodes, allocates from the blocks of the
node's NodeIPAM, and routes other nodes' blocks through their InternalIPs.
It answers CNI STATUS with code 50 until it has both. With --standalone it
needs no API server: the pools are --pool-cidr and policy comes from
--manifests, whose edits are followed.

The dataplane pins its BPF maps under --bpf-root; when neither it nor its
parent is on a bpffs, one is mounted at the parent.

From the moment it starts it serves, on --metrics-addr, /healthz (liveness:
its loops turn; never the API server's health), /readyz (readiness: it
serves ADDs; until then, what it waits for) and Prometheus /metrics.`,
		Example: `  lockstep agent --node-name "$NODE_NAME"                      # in a pod: in-cluster config
  lockstep agent --node-name node-a --kubeconfig /etc/lockstep/kubeconfig
  lockstep agent --standalone --pool-cidr 10.244.0.0/24 --pool-cidr fd00:10:244::/120`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Logger = log
			for _, p := range pools {
				prefix, err := netip.ParsePrefix(strings.TrimSpace(p))
				if err != nil {
					return fmt.Errorf("parse --pool-cidr %q: %w (want a CIDR such as 10.244.0.0/24)", p, err)
				}
				cfg.Pools = append(cfg.Pools, prefix)
			}
			if cfg.Standalone && len(cfg.Pools) == 0 {
				return errors.New("no --pool-cidr given: a standalone agent needs at least one IPv4 pool, e.g. --pool-cidr 10.244.0.0/24")
			}
			if cfg.NonMasqueradeCIDRs, err = parseCIDRs("non-masquerade-cidr", nonMasq); err != nil {
				return err
			}
			if cfg.ClusterCIDRs, err = parseCIDRs("cluster-cidr", cluster); err != nil {
				return err
			}
			cfg.LeaveServicesToKubeProxy = !translate
			if masqBit < 0 || masqBit > 31 {
				return fmt.Errorf("parse --kube-proxy-masquerade-bit %d: out of range 0-31 (kube-proxy's --iptables-masquerade-bit, 14 by default)", masqBit)
			}
			cfg.KubeProxyMasqueradeMark = 1 << masqBit
			if cfg.NodePortAddresses, err = parseNodePortAddresses(nodePorts); err != nil {
				return err
			}
			return agent.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cfg.Standalone, "standalone", false, "run without a Kubernetes API server (pools from --pool-cidr, policy from --manifests)")
	f.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of the Node the agent runs on (Kubernetes mode; default $NODE_NAME)")
	addKubeconfigFlag(cmd, &cfg.Kubeconfig)
	addPoolCIDRFlag(cmd, &pools, nil)
	addStateDirFlag(cmd, &cfg.StateDir)
	addSocketFlag(cmd, &cfg.Socket)
	addMetricsAddrFlag(cmd, &cfg.MetricsAddr, agent.DefaultMetricsAddr)
	addManifestsFlag(cmd, &cfg.Manifests)
	addDataplaneFlag(cmd, &cfg.Dataplane)
	f.StringVar(&cfg.HNSNetwork, "hns-network", agent.DefaultHNSNetwork, "HNS network the hns dataplane programs (Windows)")
	addBPFRootFlag(cmd, &cfg.BPFRoot, false)
	f.BoolVar(&cfg.Masquerade, "masquerade", true, "masquerade pod traffic to destinations outside the cluster's pod CIDRs with the node's address (iptables NAT, every Linux dataplane); false removes lockstep's masquerade rules")
	f.StringSliceVar(&nonMasq, "non-masquerade-cidr", nil, "destination pods reach with their own address although outside the cluster (a network that routes pod CIDRs back); repeatable")
	f.BoolVar(&translate, "service-translation", true, "translate pods' connections to Service ClusterIPs in the dataplane, before policy (eBPF; iptables only --standalone); false leaves them to kube-proxy, and egress policy then judges the ClusterIP, not the backend")
	f.IntVar(&masqBit, "kube-proxy-masquerade-bit", 14, "eBPF: kube-proxy's --iptables-masquerade-bit; a pod's connection the dataplane translates to an externalIP, a load-balancer IP or a NodePort of the node, and a backend on another node, gets this packet mark, so that kube-proxy masquerades it as it masquerades its own")
	f.StringSliceVar(&nodePorts, "nodeport-addresses", nil, "eBPF: kube-proxy's --nodeport-addresses: the dataplane translates pods' connections to NodePorts on the Node's InternalIPs within these CIDRs (comma-separated); primary: on the first of each family; empty, the default (kube-proxy's in iptables mode): on all of them")
	f.BoolVar(&cfg.HostRouting, "host-routing", true, "eBPF: route the packets of TCP connections between local pods and other nodes' pods in the dataplane, past the node's netfilter and routing, both ways, when the node's route leaves through an uplink; false sends every packet through the node's stack")
	f.StringSliceVar(&cfg.Uplinks, "uplinks", nil, "devices host routing uses (default: every Ethernet device that is up, not a pod's, with a global unicast address, found at start); repeatable")
	f.StringSliceVar(&cluster, "cluster-cidr", nil, "range to count as the cluster's pod CIDRs besides every node's pools (e.g. the IPPools' CIDRs); repeatable")
	addLogFlags(cmd, &logLevel, &logFormat)
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("parse --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("parse --log-format %q: want text or json", format)
}

func installCNICommand() *cobra.Command {
	var o install.Options
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Install the lockstep binary, the lockstep-cni symlink and the CNI config (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary: %w", err)
			}
			o.Source = self
			if o.Socket == api.DefaultSocket {
				o.Socket = "" // the plugin's default: the config leaves it out
			}
			res, err := install.Install(o)
			if err != nil {
				return err
			}
			if len(res.Changed) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "lockstep CNI already installed; nothing changed")
			}
			for _, path := range res.Changed {
				fmt.Fprintln(cmd.OutOrStdout(), "installed", path)
			}
			return nil
		},
	}
	f := cmd.Flags()
	addCNIDirFlags(cmd, &o)
	// --bin-dir, --conf-dir and --conf-name were their names before
	// uninstall's --cni-* spelling became the one for both commands.
	for old, now := range map[string]string{"bin-dir": "cni-bin-dir", "conf-dir": "cni-conf-dir", "conf-name": "cni-conf-name"} {
		f.AddFlag(deprecatedAlias(f.Lookup(now), old))
	}
	addSocketFlag(cmd, &o.Socket)
	f.BoolVar(&o.Portmap, "portmap", false, "chain the portmap plugin after lockstep (hostPort support)")
	f.StringVar(&o.CNIVersion, "cni-version", install.DefaultCNIVersion, "cniVersion of the config list: 1.0.0 for containerd 1.6/1.7, 2.x and CRI-O; 1.1.0 lets runtimes that call them use STATUS and GC")
	return cmd
}
