// Package uninstall removes from a node what the lockstep agent put on it,
// for `lockstep uninstall` (the CNI files are cni/install's Uninstall):
//
//   - the tc filters of the eBPF dataplane on the pods' host veths (only
//     lockstep's programs: the qdisc and other filters stay), and the maps
//     pinned under the bpf root;
//   - in both iptables modes, whichever the node uses: the masquerade
//     chain (agent/masquerade), the policy chains and the jumps to them in
//     every table, and the mode's ipsets (agent/iptables);
//   - the routes to other nodes' blocks (route protocol 108, agent/routes);
//   - the API socket, and with PurgeState the state file and its
//     directory.
//
// Each part is removed with the tools that own it, in the calling
// thread's network namespace, and reported item by item; a part that
// fails does not stop the others, so one run removes all it can and says
// what is left. Everything is found by reading the node, not the state
// file, so a second run removes nothing and a run after a crash, or on a
// node whose state file is gone, finds the same things.
//
// An agent still running would put it all back: Run refuses while one
// answers on the socket. Pods keep their interfaces and addresses (their
// runtime removes them when they go), and the node keeps IP forwarding on.
package uninstall
