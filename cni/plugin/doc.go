// Package plugin is the lockstep CNI plugin: the binary a container runtime
// executes for every ADD, DEL, CHECK, GC and STATUS on a lockstep node.
//
// The plugin owns no state and, for ADD, DEL and CHECK, does no kernel
// work: the node agent, a warm process, does the whole verb in one
// request over its unix socket (agent/api, agent/podnet). The plugin
// opens CNI_NETNS and passes the open descriptor with the request
// (SCM_RIGHTS), so the agent wires the namespace the runtime named without
// ever opening its path. What the plugin keeps is what the runtime needs:
//
//	ADD    validate config and CNI_ARGS, read a chained prevResult
//	       -> cni-add with the netns descriptor: the agent reserves,
//	       wires, attaches, puts the pod's policy in force, and undoes
//	       all of it when a step fails -> build and print the result;
//	       a result that cannot be written is undone with cni-del
//	DEL    cni-del: the agent deletes the host link, releases, and
//	       deletes again if an ADD in flight wired it meanwhile
//	CHECK  cni-check with the netns descriptor (none when it is gone):
//	       the agent compares the kernel with its record -> compare the
//	       record with prevResult
//	GC     release what the runtime no longer lists (agent) -> delete
//	       their links -> sweep host links no valid attachment owns
//	STATUS report the agent unreachable or a pool full as "not available"
//
// A plugin newer than its agent finds no cni-add, cni-del or cni-check:
// every such call fails with code 11 and "upgrade the agent and the
// plugin together", and the runtime retries until the agent's rollout,
// which installs its own plugin, reaches the node.
//
// The host-side interface name is a hash of the attachment, so DEL and GC
// can always find the link, even when the agent has no record or the pod's
// namespace is gone.
//
// Every error the plugin returns is a CNI error whose code the runtime can
// act on: 4 for bad CNI_ARGS, 7 for a bad config, 8 for a CNI_NETNS that
// cannot be opened or that the agent refuses, 11 when the agent is
// unreachable or older than the plugin (retry), 50 from STATUS when ADD
// cannot succeed now, 103 when CHECK finds drift, the agent's own codes
// (100 and up) passed through, and 5 when the kernel refused part of the
// wiring.
//
// The plugin starts once per pod operation, so its imports are kept small:
// no Kubernetes client libraries, no metrics, no storage engines.
package plugin
