// Package install puts lockstep on a node for the container runtime: the
// binary into the CNI bin directory, the lockstep-cni symlink next to it,
// and the network config list into the CNI config directory.
//
// Every file is written to a temporary name, fsync'd and renamed into
// place, so a runtime never reads half a binary or half a config, and
// running it again changes nothing that is already right. It is what the
// agent DaemonSet's init container runs.
package install
