// Package install puts lockstep on a node for the container runtime: the
// binary into the CNI bin directory, the lockstep-cni symlink next to it,
// and the network config list into the CNI config directory.
//
// Every file is written to a temporary name, fsync'd and renamed into
// place, so a runtime never reads half a binary or half a config, and
// running it again changes nothing that is already right. What it writes
// is owned by root, the binary mode 0755 and the config 0644, and a file
// whose content is right but whose owner or mode is not is fixed (and
// reported), not kept: the runtime executes the plugin as root for every
// pod. For the same reason it refuses, before writing anything, a bin or
// conf directory (or one above it, sticky ones like /tmp aside) that is
// not root's or that its group or others may write. It is what the agent
// DaemonSet's init container runs.
package install
