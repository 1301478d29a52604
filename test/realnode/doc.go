// Package realnode brings up a real Kubernetes cluster on this machine, inside
// network namespaces it creates, and takes it down again: the cluster
// lockstep's end-to-end tests, `make e2e-up` and the pod-start benchmark run
// on.
//
// Everything is real except the machines: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler on a control-plane "host"; on
// each node containerd and runc (Debian's), the kubelet and kube-proxy in
// iptables mode; images built locally and imported into each node's
// containerd; lockstep installed with `kubectl apply -k deploy`, exactly as a
// user installs it. The Kubernetes binaries come from
// tools/kube-testenv/build.sh (the release pinned there, built from the Go
// module proxy and cached outside the repository).
//
// # Hosts without machines
//
// Each host (the control plane, every node) is an init process (RunInit, run
// by `go run ./tools/e2e init`) started in namespaces of its own:
//
//   - a network namespace (lse2e-node-1, ... for the cluster named e2e) with
//     eth0 on a shared link: the namespace lse2e-lan holds the bridge every
//     host's eth0 is plugged into and routes to lse2e-ext, a host outside
//     the cluster (masquerade tests);
//   - a PID namespace, so that the init is the host's PID 1: stopping it stops
//     everything the host ran (containerd's shims and every container
//     included), and /proc/1/ns/mnt in the host's /proc is the host's mount
//     namespace, as on a real node;
//   - a mount namespace, private (mounts are not shared, as on a host without
//     systemd), with the host's own /run (tmpfs), a sysfs of its network
//     namespace (and no bpffs: lockstep must mount one), and overlays on /etc,
//     /var and /opt whose upper layers live in the cluster directory, so that
//     the node's /etc/cni/net.d, /opt/cni/bin, /var/lib/kubelet,
//     /var/lib/lockstep and so on are its own and the machine's are never
//     written; /var/lib/containerd is a plain directory (overlayfs cannot be
//     stacked on overlayfs);
//   - a UTS namespace with the node's name as host name;
//   - cgroups under /lse2e-node-1 and so on in every hierarchy (the
//     kubelet's cgroupRoot).
//
// The init mounts, starts the host's services in order (waiting for each
// one's readiness file or socket), restarts a service that exits, and on
// SIGTERM stops them in reverse order. Commands run on a host (Cluster.Exec)
// enter its namespaces with nsenter.
//
// The machine itself is never changed: no interface, route, iptables rule or
// mount outside the namespaces; the only things on the machine are the
// cluster directory, the namespaces' files in /run/netns, the cgroup
// directories, and a relay on 127.0.0.1 that forwards kubectl's connections
// to the API server. Down removes all of them, also after a failed Up or a
// killed harness: it finds what to remove by name, not from memory.
//
// Clusters have names (LOCKSTEP_E2E_NAME, default e2e) that prefix
// everything they put on the machine: clusters of different names run side
// by side (a developer's and a CI run's), one of a name replaces another.
package realnode
