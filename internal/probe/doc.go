// Package probe tests NetworkPolicy with real packets on a throwaway node.
//
// [Run] builds a node network namespace (see internal/nodesim), starts the
// real lockstep agent in it as a subprocess of the lockstep binary, creates
// every pod through the real CNI path (libcni executing lockstep-cni), opens
// a listener in each pod for every port the pod declares, and then tries a
// connection for every ordered pair of distinct pods and every port the
// destination declares. A TCP probe is allowed when the connection is
// established; a UDP probe when a nonce sent to the destination comes back
// from its echo listener. Everything a connection needs is created inside the
// source pod's namespace, so packets take the same path as pod traffic does:
// pod veth, node namespace, the agent's dataplane, destination veth.
//
// The result is a [Report]: the pods with their addresses, and one [Result]
// per probe. [Report.Table] renders it as the reachability tables of the
// upstream Kubernetes e2e tests ('.' allowed, 'X' denied, '?' could not be
// probed, '-' self), which [ParseTable] reads back and [CompareTables]
// compares cell by cell, so expected outcomes can be written by hand.
//
// A probe that cannot be made is reported with Allowed nil and an error
// instead of being guessed: on a kernel without SCTP sockets every SCTP
// probe is such a result.
//
// Run leaves nothing behind: the agent runs in its own process group and is
// killed when Run returns (and by the kernel if the prober dies), and every
// namespace, the bpffs mount and the work directory are removed on success,
// failure and cancellation alike. [SweepStale] removes what a run killed
// outright left behind.
package probe
