package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/internal/bpffs"
)

// defaultBPFFSDir is where mount-bpffs mounts without an argument: where
// systemd mounts one, and the parent of the agent's default --bpf-root.
const defaultBPFFSDir = "/sys/fs/bpf"

// newMountBPFFSCmd is `lockstep mount-bpffs`, the DaemonSet's init
// container: it mounts the bpffs the agent pins its maps in, on the host.
func newMountBPFFSCmd() *cobra.Command {
	var mountNS string
	cmd := &cobra.Command{
		Use:   "mount-bpffs [DIR]",
		Short: "Mount a bpffs at DIR (default /sys/fs/bpf) unless one is there, optionally in another mount namespace",
		Long: `Mount a BPF file system at DIR (default /sys/fs/bpf) unless DIR is already on
one; it is safe to run again. With --mount-ns it mounts inside the mount
namespace at that path instead of its own.

The agent's DaemonSet runs it as an init container with
--mount-ns /hostproc/1/ns/mnt, /proc of the host mounted at /hostproc: the
bpffs is then mounted in the host's mount namespace, outlives the agent's
container, and the agent's hostPath /sys/fs/bpf, mounted after the init
container has run, shows it with no mount propagation. Hosts that do not
run systemd, whose mounts are private, need this; on the others systemd
has mounted one already and nothing changes.`,
		Example: `  lockstep mount-bpffs                                  # /sys/fs/bpf, in this mount namespace
  lockstep mount-bpffs --mount-ns /hostproc/1/ns/mnt   # /sys/fs/bpf of the host, from a privileged container`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := defaultBPFFSDir
			if len(args) == 1 {
				dir = args[0]
			}
			where := "this mount namespace"
			mount := bpffs.Mount
			if mountNS != "" {
				where = "mount namespace " + mountNS
				mount = func(dir string) (bool, error) { return bpffs.MountInNamespace(mountNS, dir) }
			}
			mounted, err := mount(dir)
			if err != nil {
				return err
			}
			if mounted {
				fmt.Fprintf(cmd.OutOrStdout(), "mounted a bpffs at %s in %s\n", dir, where)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is on a bpffs already in %s; nothing to do\n", dir, where)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mountNS, "mount-ns", "", "mount namespace to mount in, as a file such as /proc/PID/ns/mnt (default: this process's)")
	return cmd
}
