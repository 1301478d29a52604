package agent

import (
	"context"
	"fmt"
	"log/slog"

	"lockstep.dev/lockstep/agent/cleanup"
	"lockstep.dev/lockstep/agent/iptables"
)

// openIptables loads the iptables/ipset dataplane in the mode the node
// uses (kube-proxy's heuristic: see iptables.Detect). A standalone agent
// runs on a node without kube-proxy, so the dataplane translates Services
// itself; in Kubernetes mode kube-proxy translates them, and the
// dataplane only refuses connections to Services without endpoints.
func openIptables(ctx context.Context, cfg Config, log *slog.Logger) (*backend, error) {
	r := iptables.ExecRunner{}
	mode, err := iptables.Detect(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("run agent with --dataplane iptables: %w", err)
	}
	o := iptablesOptions(cfg, mode, r)
	dp, err := iptables.New(o)
	if err != nil {
		return nil, fmt.Errorf("run agent with --dataplane iptables: %w", err)
	}
	log.Info("iptables dataplane", "mode", mode.String(), "translate_services", o.TranslateServices)
	return &backend{name: mode.String(), dp: dp, servicesLeft: !o.TranslateServices}, nil
}

// iptablesOptions are the iptables dataplane's options for cfg: it
// translates Services exactly when the agent runs standalone, the mode of
// a node without kube-proxy, unless told to leave them to kube-proxy.
func iptablesOptions(cfg Config, mode iptables.Mode, r iptables.Runner) iptables.Options {
	return iptables.Options{Mode: mode, Runner: r, TranslateServices: cfg.Standalone && !cfg.LeaveServicesToKubeProxy}
}

// iptablesResidues lists the two iptables modes: their leftovers and their
// clean-up, each run with that mode's own tools (seed 002), leaving alone
// the chains keep names for the mode.
func iptablesResidues(keep map[string][]iptables.ChainRef) map[string]residue {
	r := iptables.ExecRunner{}
	out := map[string]residue{}
	for _, m := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
		out[m.String()] = residue{
			leftovers: func(ctx context.Context) (int, error) {
				left, err := iptables.ListLeftovers(ctx, r, m, keep[m.String()]...)
				return len(left.Jumps) + len(left.Chains) + len(left.Sets), err
			},
			Cleaner: cleanup.CleanerFunc(func(ctx context.Context) error {
				_, err := iptables.Purge(ctx, r, m, keep[m.String()]...)
				return err
			}),
		}
	}
	return out
}
