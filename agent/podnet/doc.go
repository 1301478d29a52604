// Package podnet carries out the CNI verbs inside the agent, so the
// plugin makes one round trip per pod operation: it opens CNI_NETNS,
// passes the descriptor over the agent's socket with its request, and
// waits for the answer.
//
// The agent is a warm process: its address store, its dataplane and its
// netlink code are ready before the first pod arrives, where a plugin
// started for one ADD pays for all of them again. What each verb does:
//
//	ADD    reserve (endpoints) -> wire the veth into the passed namespace
//	       (agent/netsetup) -> confirm, which attaches the endpoint and puts
//	       its policy in force -> answer what the plugin needs for the CNI
//	       result. Any failure after the reservation tears the wiring
//	       down, then aborts the reservation, then answers the error.
//	DEL    delete the host link -> release (endpoints) -> delete the link
//	       again if the agent had a record, because an ADD still in flight
//	       may have wired it meanwhile
//	CHECK  read the record -> compare the kernel's wiring, the pod side
//	       through the passed namespace
//
// The order is the one the plugin kept when it did the wiring itself, and
// so are the guarantees: a DEL of an attachment whose ADD is in flight
// cancels the ADD and waits for its rollback (endpoints), and an agent
// killed in the middle of an ADD leaves the endpoint it reserved (restored
// as Ready: the state file keeps no life-cycle state) and perhaps a host
// link, both named by the attachment, which the runtime's DEL (or GC)
// removes after the restart.
//
// The namespace is a descriptor the API server has verified (an nsfs
// handle on a network namespace other than the agent's own) and closes
// after the call; podnet never opens a path, so the agent needs no view of
// the runtime's namespace mounts, and no thread of it changes namespace.
package podnet
