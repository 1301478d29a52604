// Package iptables is lockstep's iptables/ipset NetworkPolicy dataplane:
// the sibling of the eBPF dataplane (agent/datapath) for nodes that cannot
// run it. A [Dataplane] implements enforcer.Dataplane and enforces a
// [policy.Desired] with exactly the eBPF dataplane's semantics, using only
// the iptables-restore, iptables-save and ipset tools of one [Mode].
//
// # Where packets are judged
//
// Pods are routed through the node (ptp-style /32 routes), so their
// traffic crosses the node's filter table: what a pod sends arrives on its
// host-side veth (-i hostIf, policy direction egress), what it receives
// leaves through it (-o hostIf, ingress). One rule, inserted first, jumps
// from each of FORWARD and INPUT into lockstep's chain for it; those two
// hold one jump per endpoint and direction:
//
//	FORWARD -> LOCKSTEP-FORWARD: -i if -> LOCKSTEP-E-<if>, -o if -> LOCKSTEP-I-<if>
//	INPUT   -> LOCKSTEP-INPUT:   -i if -> LOCKSTEP-E-<if>   (pod to node)
//
// A packet between two pods of the node passes the sender's egress chain
// and then the receiver's ingress chain. lockstep only drops: an allowed
// packet RETURNs and continues through the node's other rules, as a packet
// the eBPF programs pass continues through the stack.
//
// What the node itself sends to a pod (kubelet probes, host-network
// processes, connections kube-proxy DNATs in OUTPUT) crosses OUTPUT, which
// lockstep does not hook: a pod cannot block its own node, as Kubernetes
// documents, and the pod's replies pass its egress chain as ESTABLISHED.
// The eBPF programs decide the same by the packet's ingress ifindex (0
// for the node's own packets). A pod's egress to the node's addresses is
// judged like any other address, in LOCKSTEP-INPUT. Earlier versions
// hooked OUTPUT too (LOCKSTEP-OUTPUT); a full reconcile, as the first
// Apply after an upgrade is, removes that chain and its jump like any
// other stale lockstep chain. One difference remains: kube-proxy in IPVS
// mode sends the service traffic of remote clients it forwards to a pod
// through OUTPUT, where lockstep no longer sees it, while the eBPF
// programs see a forwarded packet and judge it.
//
// LOCKSTEP-E-<if> first drops what the pod sends from an address that is
// not its own (IPv6: except link-local ICMPv6, via LOCKSTEP-LL6), isolated
// or not. In an isolated direction the chain then returns replies of
// accepted connections (conntrack ESTABLISHED,RELATED: an entry exists
// only for a flow that was accepted), one rule per rule key and port chunk
// (multiport holds 15 ports), and drops the rest. Rule keys for pod
// identities that share a direction, protocol and ports are one rule,
// matching the union set of those identities. ProtoOther keys (every
// protocol without ports) come after TCP, UDP and SCTP are dropped, so a
// rule with ports never admits ICMP. IPv6 neighbour discovery and MLD
// always pass, as in the eBPF programs.
//
// # Sets
//
// The remote end is matched through ipsets: a hash:ip set per pod identity
// (its pods' addresses), a hash:ip set of every pod address for PeerWorld
// (matched negated: "not a pod"), and a hash:net set per CIDR class. An
// address's class is its pod's AddrEntry.CIDRClass, or for any other
// address the class of its longest prefix in Desired.CIDRs; hash:net
// decides by the most specific entry containing an address, so each
// prefix enters the set of its own class, and as a nomatch entry the sets
// of its ancestors' classes. That is how an ipBlock except stays exact at
// any depth; a pod whose class differs from its prefix's gets a host entry
// (member in its class, nomatch in the other), and a default route of a
// class becomes its two /1 halves (ipset refuses /0). A rule whose set
// would be empty in a family can match nothing there: it is left out of
// that family, and the set is not created.
//
// A union set (hash:ip) holds the pod addresses of several identities:
// the peers of one endpoint's rules that allow the same protocol and
// ports. It is named after its sorted identity list (60 bits of its
// SHA-256: lockstep-nft4-u-0q3v8d1k5m2a), so endpoints that allow the same
// identities share it, and it lives and dies like any other set. A policy
// that allows DNS to every namespace is one rule per endpoint, not one per
// identity of the cluster: fewer rules to commit, to validate on every
// later commit, and fewer set names for iptables-restore to resolve (the
// kernel looks each up by a linear scan of every set).
//
// ipsets are one table per network namespace, shared by iptables-legacy,
// iptables-nft and everything else on the node. Set names therefore carry
// the mode and the family: lockstep-nft4-id-300, lockstep-legacy6-net-2,
// lockstep-nft4-pods. A new nft dataplane never touches a set that legacy
// leftovers reference, and cleaning up legacy destroys only legacy sets.
//
// # Apply: sets, rules, then destroy (seed 000)
//
// Every Apply runs three steps, each one command (per family for rules):
// one ipset restore creates the sets the new rules reference and updates
// members; one iptables-restore --noflush per family rewrites the chains
// and jumps that changed, atomically, so rules reference only sets that
// exist; one ipset restore destroys the sets no rule references any more.
// A set is destroyed only after the commit that removed its last
// reference, and the Enforcer runs one Apply at a time, so no reconcile
// can destroy a set between the two steps that need it, the race of seed
// 000 (Azure NPM's "selector ipset ... does not exist").
//
// Apply diffs against the state it last applied, so a change costs what
// it touches: an endpoint whose policy is unchanged is not rendered again,
// a changed endpoint's chain is flushed and refilled, an endpoint that
// comes or goes adds or deletes its jumps. With iptables-nft, a changed
// chain instead gets its new rules inserted at its head, ending in a rule
// that matches every packet, and the old rules stay behind it, dead: a
// commit that deletes rules makes iptables-nft-restore wait a whole RCU
// grace period when it exits (the kernel frees the rules first, holding
// the lock every commit of the namespace takes), tens of milliseconds per
// family on a busy node. Dead rules are cleared (flushed) once a family
// holds more than its budget of them (5% of its rules, at least 2,000), by
// every full reconcile, and whenever they reference a set that is to be
// destroyed. A command that fails makes the
// Dataplane forget that state; the next Apply reads the lockstep chains
// and sets back (iptables-save, ipset save) and reconciles them whole:
// every lockstep chain rewritten, stale chains, sets and jumps removed,
// the jumps from built-in chains put back first. [Dataplane.Invalidate]
// asks for the same repair, for a periodic resync. A failed destroy in
// step 3 is retried by the next Apply. Each family's rules change in one
// commit, but set members change just before them: for milliseconds, old
// rules can see new members.
//
// # Modes and clean-up (seed 002)
//
// iptables-legacy and iptables-nft keep separate rules that only their own
// tools see. [Detect] picks the node's mode with kube-proxy's heuristic.
// Every command names its mode's tool, and so does clean-up: [Cleanup]
// removes every lockstep jump and chain of a mode in one commit per
// family, deciding what to remove from what that mode's iptables-save
// shows, so it finishes any half-done clean-up and is idempotent;
// [DestroySets] then removes the mode's sets, [ListLeftovers] says what is
// left, and [Purge] does all of it. They take the chains a caller still
// uses in that mode (the masquerade chain of agent/masquerade, which lives
// in the nat table under every dataplane) as chains to keep. Retrying and
// remembering pending clean-ups is agent/cleanup's job.
//
// # Requirements
//
// iptables 1.8.4 or later (legacy and nft variants), ipset 7, and the
// kernel's xt_set, xt_conntrack, xt_multiport and ip_set_hash_{ip,net}
// modules; CAP_NET_ADMIN. All commands go through a [Runner], so the
// package builds on every platform and tests run it against a fake.
package iptables
