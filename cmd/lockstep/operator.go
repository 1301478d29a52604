package main

import (
	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/kube/operator"
)

// newOperatorCmd is `lockstep operator`: the cluster IPAM operator.
func newOperatorCmd() *cobra.Command {
	var (
		cfg        operator.Config
		kubeconfig string
		logLevel   string
		logFormat  string
	)
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the cluster IPAM operator: IPPool blocks to nodes, and back through the release handshake",
		Long: `Run the cluster IPAM operator. It gives every Node a NodeIPAM, cuts blocks
out of the IPPools so that each node keeps --min-free free addresses ahead of
demand, and takes excess blocks back only through the release handshake: a
block excess for --excess-ip-release-delay is marked for release, and is
taken back once the node's agent has answered ready-for-release to that very
generation of the spec. Deployed as two replicas, they elect a leader with
the Lease --lease-namespace/--lease-name; only the leader writes.

On --metrics-addr it serves /healthz (liveness: its leader election and
reconcile loops turn; never the API server's health), /readyz (readiness:
leading with its informers synced, or standing by having read the Lease)
and Prometheus /metrics (leadership, blocks assigned and released,
handshake steps, reconcile pass durations and errors, process metrics).`,
		Example: `  lockstep operator                                   # in a pod: in-cluster config, leader election
  lockstep operator --kubeconfig ~/.kube/config --leader-elect=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Logger = log
			if cfg.REST, err = client.LoadConfig(kubeconfig); err != nil {
				return err
			}
			return operator.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	addKubeconfigFlag(cmd, &kubeconfig)
	f.IntVar(&cfg.MinFree, "min-free", operator.DefaultMinFree, "free addresses each node keeps ahead of demand, per address family")
	f.DurationVar(&cfg.ExcessReleaseDelay, "excess-ip-release-delay", operator.DefaultExcessReleaseDelay,
		"how long a block must be excess before it is marked for release")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", true, "take turns with other replicas through a Lease; only the leader writes")
	f.StringVar(&cfg.LeaseNamespace, "lease-namespace", operator.DefaultLeaseNamespace, "namespace of the leader election Lease")
	f.StringVar(&cfg.LeaseName, "lease-name", operator.DefaultLeaseName, "name of the leader election Lease")
	addMetricsAddrFlag(cmd, &cfg.MetricsAddr, operator.DefaultMetricsAddr)
	addLogFlags(cmd, &logLevel, &logFormat)
	return cmd
}
