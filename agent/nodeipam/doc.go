// Package nodeipam is the agent's half of cluster IPAM in Kubernetes mode:
// it turns the node's NodeIPAM (kube/apis/v1alpha1) into pools of the
// agent's store, answers the operator's release marks, reports how full
// each block is, and frees the addresses of pods that are gone. The
// operator's half lives in kube/operator; the two meet only in the
// NodeIPAM object.
//
// # Use
//
// The agent builds the endpoints service with endpoints.Config
// PoolsFromStore (its pools are the store's, not flags), then
//
//	syncer, err := nodeipam.New(nodeipam.Options{
//		Config: restConfig, NodeName: os.Getenv("NODE_NAME"),
//		Store: st, DB: db, Service: svc, Logger: log,
//	})
//	go syncer.Run(ctx)
//	err = syncer.WaitReady(ctx) // the node's blocks are in the store
//	// ... now serve CNI ADDs
//
// Writes reports how many status writes the Syncer has sent, for the
// "API writes per 1000 allocations" benchmark. Run needs get, list and
// watch on nodes, pods and nodeipams, and update on nodeipams/status
// (deploy/rbac.yaml); it writes nothing else.
//
// # Which NodeIPAM (seed 003)
//
// Names are not identity. A Node deleted and re-created under the same
// name can find its predecessor's NodeIPAM still there, waiting for the
// garbage collector, possibly listing the very blocks the new one will get
// (Azure CNS loaded such a stale object and confused its addresses with the
// new one's). The Syncer therefore watches its Node and uses a NodeIPAM
// only while NodeIPAM.ControlledBy reports that Node's current UID. Any
// other (stale, missing, being deleted) is waited out, with the reason
// logged once and returned by WaitReady; the Syncer never loads it, never
// writes its status, and never gives up: the operator replaces it.
//
// What the store holds is keyed by the NodeIPAM too: each block records the
// UID of the NodeIPAM that assigned it (store.Block.Owner). While no
// NodeIPAM is usable the node holds no assignment at all, so blocks loaded
// from a previous one (or restored from the state file) are given up as
// described below; when the replacement assigns the same CIDR again, it is
// a new assignment of a block whose remaining addresses still belong to
// their endpoints, never a merge of two views of it.
//
// # Blocks become pools, in one transaction
//
// Each application of a NodeIPAM spec to the store is one store write
// transaction, committed through the agent's durable store (so it is on
// disk before anyone sees it). Every block in spec.blocks gets a pool named
// after its CIDR (endpoints.PoolName); the endpoints service allocates
// only from pools that are not draining, and checks that inside its own
// write transaction. A block's state (store.BlockState) decides:
//
//   - active: allocated from;
//   - quarantined: marked for release and found empty (below); draining;
//   - overlapping: overlaps another block or pool the node still holds
//     addresses in. An address that belongs to one block never arrives
//     from another: the new block is kept unused, the conflict logged as
//     an error, until the other block is gone;
//   - retired: gone from spec.blocks, or from a NodeIPAM that is no longer
//     this node's, but still holding addresses of live endpoints. That is
//     an error, logged with the pods concerned; the block drains and stays
//     until its last address is freed, and a live pod's address is never
//     dropped. Addresses of endpoints whose pod is gone (judged as the
//     orphan reconcile judges them) are released in the same transaction
//     that drops the block, through the endpoints service's one release
//     path.
//
// # The release handshake (seed 004)
//
// For each marked-for-release mark the apply transaction counts the
// allocations inside the block's CIDR, in any pool. If there are none it
// quarantines the block (its pool drains) in that same transaction, commits
// it durably, and only then writes ready-for-release; otherwise it answers
// do-not-release. ADD allocates in a store write transaction as well, so an
// ADD racing a mark either commits first, is counted, and the answer is
// do-not-release, or commits after and sees the pool draining: it
// allocates from another block or fails with a pool-exhausted error that
// names the draining one. A released mark, with the block gone from
// spec.blocks, drops it from the store (and the answer from status); a mark
// withdrawn lifts the quarantine.
//
// A drain mark (ReleaseMark.Drain: the block is outside its IPPool, which
// an administrator shrank or deleted) is quarantined in the same apply
// transaction whatever the block holds: from its commit on, no ADD gets an
// address of the block, and the pods that have one keep it. The answer is
// do-not-release while any address inside the block is allocated; the
// Syncer recomputes its answers on every allocation change, so the first
// status written after the last of them is released (CNI DEL, CNI GC, or
// the orphan reconcile) says ready-for-release, to the same generation,
// without waiting for a new spec. The operator never withdraws a drain
// mark; it gives the node another block if it needs one.
//
// Answers go into status together with observedGeneration, the generation
// of the spec they answer, with UpdateStatus on the resourceVersion the
// Syncer read: on a Conflict it reads the object again, applies what
// changed and answers again. A spec older than one already applied is never
// applied: generations only grow.
//
// The promise behind ready-for-release (this node allocates nothing from
// the block) survives a restart in two ways. It is persisted: blocks and
// their states are rows of the state file (agent/persist), written in the
// transaction that quarantines, and New loads them back with every pool
// draining until a NodeIPAM verified to be this node's assigns the block
// again, so a restarted agent allocates from no block before it has read
// its NodeIPAM. And it is re-derived: a block becomes allocatable only in
// an apply transaction that also looks at its marks, so even a state file
// that lost its blocks cannot hand out an address of a block still marked
// for release.
//
// # Usage reports, in batches
//
// status.blocks carries, per block the node holds, how many addresses are
// allocated. Allocations wake the Syncer, but a usage change alone is
// written at most once per Options.ReportInterval (one second by default),
// whatever the pod churn; an answer or a new observedGeneration is written
// at once. Usage counts lag by up to the interval, which is why the
// operator may never take a block back on a low count, only through the
// handshake. CNI ADD never waits on the API server: it touches only the
// store and the state file, and keeps working while the API server is
// down; reports resume when it is back.
//
// # Orphans (seed 001)
//
// The whereabouts reconciler freed the address of a StatefulSet pod that
// was still Pending, because its IP was not yet in its status, and handed
// it to the next pod. Here an endpoint is released only when no pod with
// its UID exists in a consistent list of the node's pods requested after
// the endpoint was created (the store revision read just before the list
// is compared with the endpoint's creation revision), and never while a pod
// of its name is Pending, has no network status yet, or reports one of its
// addresses (endpoints.Orphaned). The Syncer watches the node's pods with
// an informer to decide when a consistent list is worth asking for, and
// writes nothing to pods. CNI GC and this reconcile release through the
// same function (endpoints.Service.ReleaseTxn) with different predicates.
package nodeipam
