// Package v1alpha1 holds lockstep's custom resources, API group
// lockstep.dev, version v1alpha1: IPPool and NodeIPAM. The CRD manifests in
// deploy/crds are generated from these types by kube/generate.sh; edit the
// types and their markers, never the YAML.
//
// # How addresses reach a node
//
// An IPPool is a cluster-wide set of ranges of one address family, cut into
// blocks of spec.blockSize bits (a /26 gives 64 IPv4 addresses). The operator
// gives each node blocks by listing them in the node's NodeIPAM spec; the
// agent on that node allocates pod addresses from those blocks in its own
// transactional store and reports how full each block is in the NodeIPAM
// status. Individual pod addresses never appear in the API: the agent owns
// them, so a pod ADD costs no API write and a node's NodeIPAM changes only
// when its blocks do or its usage report is due.
//
// # One writer per field
//
// Every field of NodeIPAM has exactly one writer, and RBAC in deploy/rbac.yaml
// enforces it:
//
//   - metadata and spec: the operator. The agent has no update permission on
//     nodeipams, only on nodeipams/status.
//   - status: the agent on the node the object is named after. The operator
//     has no permission on nodeipams/status.
//
// # The release handshake
//
// The race this is built against (Cilium's excess-IP release, seed 004): the
// agent allocates from a block, and before its next usage report reaches the
// API server the operator sees the block as empty, takes it back and gives
// it to another node. Two pods now share an address. No reporting interval
// closes that window; only asking the agent first does.
//
// Cilium runs the handshake through one map in CiliumNode status that both
// sides write, relying on resourceVersion conflicts to serialise them. Here
// the two halves live on the two sides of the object instead, so neither side
// ever overwrites the other and a conflict is only ever a stale read:
//
//   - spec.releases (operator): {cidr, state, since, drain} with state
//     marked-for-release ("I want this block back") or released ("it is
//     gone from spec.blocks and back in the pool"); drain is true when the
//     block is wanted back because it left its pool (see Draining below).
//   - status.releases (agent): {cidr, state, since} with state
//     ready-for-release ("nothing is allocated from it and I have stopped
//     allocating from it") or do-not-release ("it holds pods").
//
// A release runs:
//
//  1. The operator adds {cidr, marked-for-release} to spec.releases. The
//     block stays in spec.blocks. metadata.generation goes up to G.
//  2. The agent sees generation G. In one store transaction it checks the
//     block: if it holds no allocation it quarantines the block (no new
//     allocation may come from it) and persists that; only then does it
//     write {cidr, ready-for-release} to status.releases together with
//     status.observedGeneration = G. If the block holds allocations it
//     writes {cidr, do-not-release} instead.
//  3. The operator releases only when status.observedGeneration equals
//     metadata.generation and the answer is ready-for-release
//     (NodeIPAM.MayRelease). It then, in one update, removes the block from
//     spec.blocks and sets the mark to released; the block is back in the
//     pool and may be given to another node at once: this node's agent
//     promised in step 2 not to allocate from it.
//  4. The agent sees released, drops the block from its store and removes
//     its status.releases entry.
//  5. The operator removes the released mark once status has caught up
//     (observedGeneration equals generation) and no longer lists the cidr.
//
// On do-not-release the operator withdraws its mark (deletes the entry);
// the agent then deletes its answer. Withdrawing a mark after
// ready-for-release is allowed too: the agent lifts the quarantine. An agent
// that never answers keeps its blocks: they come back to the pool only when
// the Node, and with it the NodeIPAM, is deleted.
//
// Why the generation check matters: answers are kept in status until the
// agent next writes it, so without the check an answer given to an old mark
// could approve a new one. The agent writes observedGeneration in the same
// status update as its answers, so an answer is current exactly when
// observedGeneration equals the generation of the spec the operator holds.
//
// Every write is an Update carrying the resourceVersion the writer read
// (kube/client refuses an Update without one), never a blind overwrite: a
// 409 Conflict means re-read and decide again, which is what makes each
// step's check-then-write atomic with respect to the other side.
//
// # Draining a block outside its pool
//
// The marks above are excess marks: the node has the block to spare. An
// administrator who shrinks an IPPool (drops ranges from spec.cidrs, to give
// them back to the network) or deletes it wants back every block no longer
// inside the spec.cidrs of the pool its spec.blocks entry names, empty or
// not. The operator marks each such block at once, with drain: true on the
// mark, and the same handshake runs with three differences:
//
//   - In step 2 the agent quarantines the block whatever it holds: no new
//     pod gets an address from it from that transaction on, while the pods
//     that have one keep it until they are deleted. It answers
//     do-not-release while any address of the block is allocated, and
//     ready-for-release in the first status it writes after the last one
//     is freed (a CNI DEL, CNI GC or its orphan reconcile), with no new
//     spec needed: the mark it answers is the same.
//   - The operator never withdraws a drain mark, not on do-not-release and
//     not when the node runs short: the drained block counts as no free
//     address, so a node that needs more gets a new block from the pool's
//     remaining ranges. It releases the block as soon as MayRelease holds,
//     with no excess delay.
//   - An excess mark on a block found outside its pool becomes a drain mark
//     (or is released at once, if MayRelease already holds). A drain mark
//     stays a drain mark even if the range is added back: the block is
//     released once empty and may then be cut again.
//
// The operator never cuts a block outside its pool's current spec.cidrs,
// and confirms a pool's spec with the API server, not its cache, before it
// writes a drain mark.
//
// # Stale objects after a node is replaced
//
// A NodeIPAM is named after its Node and has that Node as its controller
// owner reference (NewNodeIPAM), so the garbage collector deletes it with
// the Node. Under a loaded API server the collector lags, and a Node deleted
// and re-created under the same name can find the old NodeIPAM still there
// (Azure CNS, seed 003). Names are therefore not identity: the agent uses a
// NodeIPAM only if ControlledBy reports the UID of the Node it runs on, and
// otherwise waits; the operator deletes such a stale object with a UID
// precondition (so it can never delete its replacement) and creates a fresh
// one. The agent keys what it loaded from a NodeIPAM by the object's UID, so
// a replacement with the same blocks is a new set of blocks, not the old one.
//
// +kubebuilder:object:generate=true
// +groupName=lockstep.dev
package v1alpha1
