// Package netsetup wires a pod into the node's network: one veth pair per
// attachment, with the pod end created directly inside the pod's network
// namespace and the host end left in the node's.
//
// Lockstep routes pods instead of bridging them. Every pod interface carries
// its addresses as /32 and /128 and sends everything to a fixed link-local
// gateway — 169.254.1.1 for IPv4, fe80::1 for IPv6 — whose MAC address is
// the host end's fixed HostMAC. The pod learns that MAC from a permanent
// neighbour entry, so it never has to ARP or solicit for its gateway. On the
// node, a /32 or /128 route per pod address points at the host end. No
// bridge, no per-pod subnet, no proxy ARP: the node's routing table is the
// only switch.
//
// The host end's name is derived from the attachment (see HostIfName) so DEL
// and garbage collection can find it from the container ID and interface
// name alone, even when the agent has lost its record or the pod's namespace
// is already gone. Deleting the host end deletes the pod end and every route
// through it, which is why Teardown needs nothing else.
//
// Setup creates the pod end in the pod namespace in the same netlink request
// that creates the pair: creating it on the host and moving it costs a
// second interface registration, the dominant cost of an ADD. Anything Setup
// does after the pair exists is undone by deleting the host end, so a
// failed Setup leaves nothing behind.
//
// All functions act on the network namespace of the calling thread as the
// node's namespace. They reach the pod's through an open handle on it
// (SetupArgs.Netns, CheckArgs.Netns), never a path, and only through
// netlink sockets opened inside it, by a locked thread that is discarded
// afterwards: no thread that runs other goroutines ever changes
// namespace. The lockstep agent wires pods with the handle the
// CNI plugin passes over its socket, so it needs no view of the runtime's
// namespace mounts. Callers that simulate a node run them inside that
// node's ns.Do.
//
// Veths and network namespaces are Linux's: on other systems the package
// builds, and Setup, Teardown, Check and ListHostLinks fail with an error
// wrapping errors.ErrUnsupported.
package netsetup
