package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/agent/uninstall"
	"lockstep.dev/lockstep/cni/install"
)

func newUninstallCmd() *cobra.Command {
	var (
		cni  install.Options
		node uninstall.Options
	)
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove everything lockstep put on this node (stop the agent first)",
		Long: `Remove everything lockstep put on this node: the CNI config list, the
lockstep binary and the lockstep-cni symlink, lockstep's tc filters on the
pods' host veths, the maps pinned under --bpf-root, lockstep's iptables
chains and ipsets in both iptables modes (the masquerade chain included),
lockstep's routes (protocol 108) and the agent's socket. The state file
stays unless --purge-state. Pods keep their interfaces until their runtime
removes them; IP forwarding stays on.

Run it in the node's network namespace, as root, once the agent has
stopped (it refuses while an agent answers on --socket). It prints what
it removes, removes nothing on a second run, and exits non-zero, saying
what is left, when something could not be removed.`,
		Example: `  kubectl -n kube-system delete daemonset lockstep-agent   # then, on each node:
  lockstep uninstall
  lockstep uninstall --purge-state --cni-conf-dir /etc/cni/net.d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runtime.GOOS == "linux" && os.Geteuid() != 0 {
				return errors.New("uninstall: run it as root: removing tc filters, iptables rules and routes needs CAP_NET_ADMIN")
			}
			if err := uninstall.CheckNoAgent(node.Socket); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var failed []error
			files, err := install.Uninstall(cni)
			if err != nil {
				failed = append(failed, err)
			}
			removed := 0
			for _, p := range files.Removed {
				fmt.Fprintln(out, "removed", p)
				removed++
			}
			for _, k := range files.Kept {
				fmt.Fprintln(out, "kept", k)
			}
			rep, err := uninstall.Run(cmd.Context(), node)
			if rep == nil {
				return err
			}
			for _, r := range rep.Removed {
				fmt.Fprintln(out, "removed", r)
				removed++
			}
			for _, k := range rep.Kept {
				fmt.Fprintln(out, "kept", k)
			}
			for _, s := range rep.Skipped {
				fmt.Fprintln(out, "skipped", s)
			}
			failed = append(failed, rep.Errors...)
			if len(failed) > 0 {
				for _, e := range failed {
					fmt.Fprintln(cmd.ErrOrStderr(), "lockstep: could not remove:", e)
				}
				return fmt.Errorf("uninstall incomplete: %d things could not be removed (see above); fix their causes and run lockstep uninstall again", len(failed))
			}
			if removed == 0 {
				fmt.Fprintln(out, "nothing of lockstep's left to remove")
			}
			return nil
		},
	}
	f := cmd.Flags()
	addCNIDirFlags(cmd, &cni)
	addBPFRootFlag(cmd, &node.BPFRoot, false)
	addStateDirFlag(cmd, &node.StateDir)
	addSocketFlag(cmd, &node.Socket)
	f.BoolVar(&node.PurgeState, "purge-state", false, "remove the state file and directory too")
	return cmd
}
