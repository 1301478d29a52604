package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/verdicts"
)

func newMonitorCmd() *cobra.Command {
	var socket, output string
	var timeout, interval time.Duration
	var f verdicts.Filter
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Stream policy verdicts (drops and newly allowed connections) by pod and policy until Ctrl-C",
		Long: `Stream the dataplane's verdicts, as the agent reads them: every dropped
packet and every new connection allowed, with the pod it entered or left
(namespace/name), the peer (a pod's namespace and labels, or "world"), and
what decided it: the policy rule that allowed it ("team/web ingress[0]", as
lockstep explain names it), or "default deny" (a policy isolates the pod in
that direction and no rule allows the peer; the line names those policies),
"not isolated" (no policy selects the pod that way), "anti-spoofing", "no
endpoint", "from the node" (a pod never blocks its own node, whose kubelet
probes it), "service without backend" (REJECT: a TCP reset or an ICMP port
unreachable went back to the pod). A connection through a Service shows its
backend, which policy judged.

Repeats are folded: one line per flow (pod, direction, peer, addresses,
protocol, destination port, verdict, rule) per --interval, with a count;
--interval 0 prints every event. Filters select by the pod the packet
entered or left, either end's namespace, the verdict, or a policy: one
whose rule allowed, or one that isolates the pod of a default-deny drop.

Any number of monitors may run at once, each gets every event. The agent
makes the programs emit events only while at least one monitor is
connected, and stops when the last one goes, however it went.

Only the eBPF dataplane reports verdicts. With -o json each verdict is one
JSON object on a line; with -o yaml, one YAML document.`,
		Example: `  lockstep monitor --verdict drop
  lockstep monitor --pod shop/frontend --interval 5s
  lockstep monitor --policy shop/allow-web -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 0 {
				return fmt.Errorf("parse --interval %s: want 0 or more", interval)
			}
			if err := f.Validate(); err != nil {
				return err
			}
			c := api.NewClient(socket, timeout)
			defer c.Close()
			return runMonitor(cmd.Context(), c, api.MonitorRequest(f), interval, newVerdictWriter(cmd.OutOrStdout(), output))
		},
	}
	fl := cmd.Flags()
	addSocketFlag(cmd, &socket)
	fl.DurationVar(&timeout, "timeout", api.DefaultTimeout, "how long to wait for the agent")
	addOutputFlag(cmd, &output)
	fl.DurationVar(&interval, "interval", time.Second, "fold repeats of a flow within this interval into one line with a count (0: every event)")
	fl.StringVar(&f.Pod, "pod", "", "only verdicts at this pod (NAMESPACE/NAME): the one the packet entered or left")
	fl.StringVar(&f.Namespace, "namespace", "", "only verdicts with a pod of this namespace at either end")
	fl.StringVar(&f.Verdict, "verdict", "", "only this verdict: allow, drop or reject")
	fl.StringVar(&f.Policy, "policy", "", "only verdicts of this policy (NAMESPACE/NAME): a rule of it allowed, or it isolates the pod of a default-deny drop")
	return cmd
}

// runMonitor prints the agent's verdicts through write, folded by an
// aggregator over interval, until ctx ends.
func runMonitor(ctx context.Context, c *api.Client, req api.MonitorRequest, interval time.Duration, write func(api.Verdict) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan api.Verdict, 1024)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Monitor(ctx, req, func(v api.Verdict) error {
			select {
			case in <- v:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	agg := verdicts.NewAggregator(interval)
	tick := time.NewTicker(max(interval/4, 50*time.Millisecond))
	defer tick.Stop()
	flush := func() error {
		for _, v := range agg.Flush() {
			if err := write(v); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case v := <-in:
			for _, out := range agg.Add(v) {
				if err := write(out); err != nil {
					return err
				}
			}
		case now := <-tick.C:
			if agg.Due(now) {
				if err := flush(); err != nil {
					return err
				}
			}
		case err := <-errc:
			if ferr := flush(); err == nil {
				err = ferr
			}
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("monitor the agent on %s: %w", c.Socket(), err)
			}
			return nil
		}
	}
}

// newVerdictWriter returns what prints one verdict in output to w: a
// line for a person (table), one JSON object per line, or one YAML
// document each.
func newVerdictWriter(w io.Writer, output string) func(api.Verdict) error {
	if output != outputTable {
		return func(v api.Verdict) error { return writeStreamed(w, output, v) }
	}
	return func(v api.Verdict) error { return writeVerdict(w, v) }
}

// writeVerdict prints v as one line for a person.
func writeVerdict(w io.Writer, v api.Verdict) error {
	verdict := map[string]string{"allow": "ALLOW", "drop": "DROP", "reject": "REJECT"}[v.Verdict]
	if verdict == "" {
		verdict = v.Verdict
	}
	arrow := "->"
	if v.Dir == "ingress" {
		arrow = "<-"
	}
	// A folded flow's source ports differ: it prints none.
	count, sport := "", fmt.Sprint(v.Sport)
	if v.Count > 1 {
		count, sport = fmt.Sprintf(" x%d", v.Count), "*"
	}
	rule := v.Rule
	if len(v.Isolators) > 0 {
		rule += " (isolated by " + strings.Join(v.Isolators, ", ") + ")"
	}
	_, err := fmt.Fprintf(w, "%s %-6s %s %s %s %s %s:%s -> %s:%d by %s%s\n",
		v.Time.Format("15:04:05"), verdict, v.Endpoint, arrow, v.Peer, v.Proto, v.Saddr, sport, v.Daddr, v.Dport, rule, count)
	return err
}
