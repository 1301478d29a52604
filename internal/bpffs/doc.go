// Package bpffs mounts the BPF file system lockstep pins its maps in, where
// a node has none.
//
// Pinned maps outlive the agent only on a bpffs. systemd mounts one at
// /sys/fs/bpf on most distributions, but not every host runs systemd, and
// `ip netns exec` gives the command it runs a fresh sysfs without one. The
// agent therefore mounts a bpffs at its pin root's parent (/sys/fs/bpf for
// the default /sys/fs/bpf/lockstep) when neither the root nor its parent is
// on one, as Cilium does, and then creates the root inside it: other BPF
// users of the node find the file system where they expect it, and
// lockstep's pins in a directory of their own. A root already on a bpffs
// changes nothing.
//
// In a container that mount dies with the container's mount namespace.
// The DaemonSet's init container therefore runs `lockstep mount-bpffs
// --mount-ns /hostproc/1/ns/mnt`, which mounts it in the host's mount
// namespace (MountInNamespace): the mount lives on the host, survives the
// agent's container, and the agent's hostPath /sys/fs/bpf, mounted after the
// init container ran, shows it without any mount propagation. That is what
// makes hosts without systemd work, whose mounts are private.
package bpffs
