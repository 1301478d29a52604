// Package plugin is the lockstep CNI plugin: the binary a container runtime
// executes for every ADD, DEL, CHECK, GC and STATUS on a lockstep node.
//
// The plugin owns no state. Addresses belong to the node agent, which it
// reaches over a unix socket through agent/api; the kernel wiring belongs
// to cni/netsetup. What the plugin owns is the order of the steps and what
// happens when one of them fails:
//
//	ADD    reserve (agent) -> wire (netsetup) -> confirm (agent)
//	       any failure after the reservation: tear the wiring down, then
//	       abort the reservation, then report
//	DEL    tear down -> release (agent) -> tear down again if the agent had
//	       a record, because an ADD still in flight may have wired it
//	CHECK  read the agent's record -> compare the kernel and prevResult
//	GC     release what the runtime no longer lists -> delete their links
//	       -> sweep host links no valid attachment owns
//	STATUS report the agent unreachable or a pool full as "not available"
//
// The host-side interface name is a hash of the attachment, so DEL and GC
// can always find the link, even when the agent has no record or the pod's
// namespace is gone.
//
// Every error the plugin returns is a CNI error whose code the runtime can
// act on: 4 for bad CNI_ARGS, 7 for a bad config, 11 when the agent is
// unreachable (retry), 50 from STATUS when ADD cannot succeed now, 103 when
// CHECK finds drift, the agent's own codes (100 and up) passed through, and
// 5 when the kernel refused part of the wiring.
//
// The plugin starts once per pod operation, so its imports are kept small:
// no Kubernetes client libraries, no metrics, no storage engines.
package plugin
