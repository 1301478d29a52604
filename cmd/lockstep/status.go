package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/agent/api"
)

func newStatusCmd() *cobra.Command {
	var socket, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's dataplane, Service translation, pools, last apply error and pending clean-ups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := api.NewClient(socket, timeout)
			defer c.Close()
			st, err := c.Status(cmd.Context())
			if err != nil {
				return fmt.Errorf("ask the agent on %s for its status: %w", socket, err)
			}
			if output != outputTable {
				return writeStructured(cmd.OutOrStdout(), output, st)
			}
			return writeStatus(cmd.OutOrStdout(), st, time.Now())
		},
	}
	f := cmd.Flags()
	addSocketFlag(cmd, &socket)
	f.DurationVar(&timeout, "timeout", api.DefaultTimeout, "how long to wait for the agent")
	addOutputFlag(cmd, &output)
	return cmd
}

// writeStatus prints st for a person.
func writeStatus(out io.Writer, st *api.StatusResponse, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if dp := st.Dataplane; dp != nil {
		fmt.Fprintf(w, "Dataplane:\t%s\n", dp.Name)
		switch {
		case dp.LastApply.IsZero() && dp.LastApplyError == "":
			fmt.Fprintf(w, "Last apply:\tnone yet\n")
		case dp.LastApplyError != "":
			fmt.Fprintf(w, "Last apply:\tFAILED: %s\n", dp.LastApplyError)
		default:
			fmt.Fprintf(w, "Last apply:\tok, %s ago\n", now.Sub(dp.LastApply).Round(time.Millisecond))
		}
		keys := make([]string, 0, len(dp.Counts))
		for k := range dp.Counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s:\t%d\n", k, dp.Counts[k])
		}
		if s := dp.Services; s != nil {
			fmt.Fprintf(w, "Services:\t%d frontends, %d backends", s.Frontends, s.Backends)
			if s.WithoutBackends > 0 {
				fmt.Fprintf(w, ", %d without a ready endpoint", s.WithoutBackends)
			}
			if s.WithoutLocalBackends > 0 {
				fmt.Fprintf(w, ", %d without one on this node (internalTrafficPolicy Local: dropped)", s.WithoutLocalBackends)
			}
			if s.LeftToKubeProxy {
				fmt.Fprintf(w, " (translated by kube-proxy, not lockstep)")
			}
			fmt.Fprintln(w)
			for _, o := range s.OverCapacity {
				fmt.Fprintf(w, "  namespace %s not translated:\t%s\n", o.Namespace, o.Reason)
			}
		}
		if len(dp.FailedPolicies) > 0 || len(dp.FailedEndpoints) > 0 {
			fmt.Fprintf(w, "Failing closed:\t%d policies, %d endpoints (isolated, no allow; fix or delete the policies)\n", len(dp.FailedPolicies), len(dp.FailedEndpoints))
		}
		for _, f := range dp.FailedPolicies {
			fmt.Fprintf(w, "  policy %s:\t%s\n", f.Policy, f.Reason)
		}
		for _, f := range dp.FailedEndpoints {
			if f.Ingress != "" {
				fmt.Fprintf(w, "  endpoint %s ingress:\t%s\n", f.HostIf, f.Ingress)
			}
			if f.Egress != "" {
				fmt.Fprintf(w, "  endpoint %s egress:\t%s\n", f.HostIf, f.Egress)
			}
		}
		if len(dp.PendingCleanups) == 0 {
			fmt.Fprintf(w, "Pending clean-ups:\tnone\n")
		} else {
			fmt.Fprintf(w, "Pending clean-ups:\t%d\n", len(dp.PendingCleanups))
		}
		for _, c := range dp.PendingCleanups {
			fmt.Fprintf(w, "  %s:\t%s; since %s, %d attempts", c.Backend, c.Reason, c.Since.UTC().Format(time.RFC3339), c.Attempts)
			if c.LastError != "" {
				fmt.Fprintf(w, ", last error: %s", c.LastError)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "Pools:\t\n")
	for _, p := range st.Pools {
		state := ""
		if p.Draining {
			state = " (draining)"
		}
		fmt.Fprintf(w, "  %s:\t%d used, %d free of %d%s\n", p.CIDR, p.Used, p.Free, p.Size, state)
	}
	return w.Flush()
}
