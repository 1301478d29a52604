// Package operator is lockstep's cluster IPAM operator (`lockstep
// operator`): it gives every Node a NodeIPAM, cuts blocks out of IPPools so
// that each node stays a few addresses ahead of demand, and takes back
// excess blocks, and blocks left outside a shrunk or deleted pool, through
// the release handshake of kube/apis/v1alpha1, whose package documentation
// says who writes which field. The agent's half is
// agent/nodeipam; the two meet only in the NodeIPAM object.
//
// # One judgement, pure
//
// Everything the operator decides is made by one function, planFor (plan.go
// and, per node, decideNode in decide.go), from the pools, Nodes and
// NodeIPAMs as last read, the time, and this replica's timers. It returns
// the writes it wants: NodeIPAMs to create (empty) and to delete (stale),
// spec updates that run the handshake, blocks to assign, pool statuses, and
// the timers to keep. The controller (controller.go) only reads, calls it
// and writes, so every rule below is table-tested without an API server
// (plan_test.go), and the integration tests (*_kube_test.go, against a real
// kube-apiserver from test/kubetest) prove the reads and writes around
// it.
//
// For one node, blocks outside the CIDRs of the pool their spec.blocks
// entry names (or whose pool is gone), and blocks already under a drain
// mark, drain (drain.go): each is marked at once with drain: true (an
// excess mark on it becomes one), counts as no free address, is released
// as soon as NodeIPAM.MayRelease holds, with no delay, and its mark is
// never withdrawn. Because a drain mark is never withdrawn, a pool the
// cache shows shrunk is read again from the API server before any is
// written: a range added to a pool and a block cut from it can reach the
// informers in either order. For every other block, in order of
// precedence:
//
//  1. A released mark the agent has caught up with (status current, no
//     answer and no usage for the block) is deleted: handshake step 5.
//  2. A mark the agent answered do-not-release, in a status whose
//     observedGeneration is the current generation, is withdrawn at once.
//  3. If the node has fewer than --min-free free addresses in a family
//     (counting only blocks it may allocate from: not marked ones), marks
//     are withdrawn before any new block is cut.
//  4. A marked block is released (taken out of spec.blocks, its mark set to
//     released, in one Update) only when NodeIPAM.MayRelease holds, which
//     needs a ready-for-release answer in a current status, this replica's
//     own timer for the block has run the whole --excess-ip-release-delay,
//     and no pod has an address in it (below).
//  5. A block the agent reports empty, and without which the node still has
//     --min-free free addresses, is excess; one excess for the whole delay,
//     continuously, is marked for release. Any pass that finds it not
//     excess stops its timer. A block with no usage report is never excess.
//  6. What the node still lacks is cut from the Ready pools of the family,
//     in name order, lowest free block first.
//
// Timers live in memory only. An operator that restarts, or a replica that
// takes over, finds marks it did not make and starts their timers from
// zero, so it releases later than a persisted deadline would have, never
// earlier (seed 004, and Cilium's reviewers asked for exactly this). An
// agent that never answers keeps its block: nothing but the answer can
// release it.
//
// # Held blocks
//
// A block is never cut while any NodeIPAM holds it: in spec.blocks
// (current, stale or orphaned objects alike), under a released mark not yet
// cleared (its agent may not have dropped it), or in status.blocks, where
// the agent reports every block its store still holds, including retired
// ones outside spec.blocks. Overlap, not equality, is what counts, so a
// pool re-created with another block size cannot cut across old blocks.
//
// # Pods outrank answers
//
// The answers are only as good as the node that writes them: without the
// admission policy deploy/ ships (node-scoped-writes.yaml), any node's
// agent may write every NodeIPAM's status, and a compromised node could
// answer ready-for-release for another node's busy block. So the operator
// watches every pod (trimmed to its addresses, pods.go) and, whatever a
// status says, never releases a block, drained or excess, in which a pod
// that is not finished and not on the host network still has an address;
// it keeps the mark, logs which pod holds the block, and tries again at
// the next pass (pod events wake none: in a large cluster they never
// stop). Such an address also holds its block against being cut, like the
// blocks below.
//
// # Replaced Nodes (seed 003)
//
// A NodeIPAM whose name is a Node's but whose controller owner reference
// names another UID belongs to a deleted predecessor the garbage collector
// has not collected yet. It is never reused: the operator asks the API
// server (not its cache) for the Node, and if the Node's UID really differs
// it deletes the object with a UID precondition, so a replacement created
// meanwhile can never be deleted by mistake, and logs why. Its blocks stay
// held while it exists; the replacement is created once it is gone. After
// that, the new node's agent may still hold addresses in the old blocks
// (its pods outlived the Node object), which it reports in the
// replacement's status: until it has, this replica keeps the old blocks
// reserved (in memory, like the timers).
//
// # Writes
//
// Every write is conditional: Update and UpdateStatus carry the
// resourceVersion read (kube/client refuses one without), Delete a UID
// precondition, Create fails if the name exists. A Conflict means someone
// (the agent, another replica, a person) wrote in between: the operator
// reads the object again and decides again with the same pure functions,
// up to a few times, then leaves it to the next pass.
//
// # Two writers
//
// Conditional writes protect one object. Cutting a block is a decision
// about all of them: two replicas that both believe they lead, each reading
// a cache the other's last write has not reached, would give the same
// block to two nodes, each write succeeding on its own object. Leader
// election makes that rare, not impossible (a paused leader can write after
// its lease expired). So blocks are added to NodeIPAMs only through the
// pool's ledger, the PendingBlocksAnnotation of the IPPool (ledger.go):
//
//  1. Read the pool. Pending blocks on it are someone's unfinished
//     assignment: complete it, clear it, start again.
//  2. List the NodeIPAMs from the API server, not the cache, and plan.
//  3. Write the blocks to cut into the annotation, conditional on the
//     pool's resourceVersion from step 1.
//  4. Add each to its NodeIPAM, then clear the annotation. A block the
//     pool, read again just before, no longer contains (it was shrunk
//     meanwhile) is left out.
//
// A writer can pass step 3 only on a pool without pending blocks, so its
// list in step 2 follows every earlier assignment's step 4. Completing
// someone else's set is safe because each addition first reads the
// NodeIPAM, then checks the set is still pending, then writes on the
// version read: whoever cleared the set had written to that NodeIPAM
// before, so a late writer's Update conflicts. The conflict storm test runs
// two replicas with leader election off and fails, with the same block on
// two nodes, if the ledger is bypassed.
//
// Everything else a plan writes only ever frees blocks (a release, a
// delete) or touches one object (marks), and is safe with per-object
// conditions alone.
//
// # Leader election
//
// Replicas take turns through a coordination.k8s.io/v1 Lease
// (--lease-namespace/--lease-name). The elector (elect.go) follows
// client-go's tools/leaderelection: a Lease is free when it has no holder
// or its record has not changed for its duration by the candidate's own
// clock; taking and renewing it are conditional Updates. The leader's term
// runs under a context that is cancelled the moment a renewal finds another
// holder, or when the renew deadline (shorter than the lease duration)
// passes without one, so it stops writing before anyone else may lead; on
// shutdown it stops writing first and then gives the Lease up, so the
// other replica takes over at once. Each term starts its informers and its
// timers afresh.
//
// It is not client-go's package because that package imports the
// generated clientset, whose scheme registers every Kubernetes API group
// in package initialisers. lockstep is one binary, and the CNI plugin runs
// every initialiser on each pod ADD (cmd/lockstep/deps_test.go): measured
// with GODEBUG=inittrace=1, importing tools/leaderelection on top of
// kube/client added about 1.8 MB of init allocations and 9 ms, and grew a
// test binary from 11 to 49 MB, besides needing modules go.mod does not
// have. The operator reads Nodes and Leases through kube/client's REST
// clients into lockstep's own API types (kube/api), as agent/source does.
//
// # Pool status
//
// IPPool status is the operator's: allocatedBlocks (blocks in some
// spec.blocks), Ready (False with reason Overlap when its ranges overlap
// another pool's, or InvalidSpec; no block is cut from a pool that is not
// Ready) and Exhausted.
package operator
