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
// not its own (IPv6: except link-local ICMPv6 and duplicate address
// detection from ::, via LOCKSTEP-LL6), isolated or not, then refuses
// connections to Service frontends without backends (see Services), then
// (IPv6) drops packets to IPv4-mapped addresses and sends ICMPv6 through
// LOCKSTEP-ND6, which drops the neighbour discovery and MLD that do not
// keep to the link as their RFCs say (as the programs' nd_ok does).
// LOCKSTEP-I-<if> (IPv6) first drops packets from :: and ND and MLD
// forwarded to the pod (LOCKSTEP-ND6-IN); the node's own reach the pod
// through OUTPUT. In an isolated direction the chain then returns replies of
// accepted connections (conntrack ESTABLISHED,RELATED: an entry exists
// only for a flow that was accepted), one rule per rule key and port chunk
// (multiport holds 15 ports), and drops the rest. Rule keys for pod
// identities that share a direction, protocol and ports are one rule,
// matching the union set of those identities. ProtoOther keys (every
// protocol without ports) come after TCP, UDP and SCTP are dropped, so a
// rule with ports never admits ICMP. The ND and MLD that LOCKSTEP-ND6
// let through pass an isolated egress without policy, as in the programs.
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
// # Services
//
// Kubernetes judges NetworkPolicy on the pod that receives a connection,
// after Service translation. [policy.Desired.Services] maps each frontend
// (ClusterIP, protocol, port) to its ready backends.
//
// On a node with kube-proxy (the agent's Kubernetes mode), kube-proxy
// translates: its DNAT in nat PREROUTING comes before filter FORWARD, so
// lockstep's chains already judge the backend, with nothing to add
// (TestPrivilegedKubeProxyServices proves it with kube-proxy's rules). But
// kube-proxy refuses a Service without endpoints with a REJECT in its own
// filter chain, which FORWARD reaches after lockstep's jump: a client whose
// egress is isolated would have the connection dropped in silence. So
// lockstep refuses it itself: each family with a frontend has a
// hash:ip,port set of the frontends without backends
// (lockstep-nft4-noep: "10.96.0.20,tcp:80"; not those whose backends are
// all on other nodes under internalTrafficPolicy Local, which kube-proxy
// drops, and lockstep with it), and every endpoint's egress
// chain, right after anti-spoofing and before any policy, sends a packet to
// one of them to LOCKSTEP-REJECT (a TCP reset; for UDP and SCTP an ICMP
// port unreachable). Like kube-proxy's REJECT, this needs the node to
// route the Service range (a default route does): the packet must reach
// FORWARD.
//
// Without kube-proxy ([Options].TranslateServices: the agent's standalone
// mode, the demo, lockstep probe), the dataplane translates as kube-proxy
// does, for what local endpoints send only (the node's own traffic
// crosses nat OUTPUT, which lockstep does not hook; a remote host's
// arrives by another interface), in the nat table of both families:
//
//	PREROUTING  -> LOCKSTEP-SVC-PODS:    -s <pod> -i <if> -j LOCKSTEP-SVC-ALL, one per endpoint address
//	LOCKSTEP-SVC-ALL:     -d CLUSTERIP -p tcp --dport 80 -j LOCKSTEP-SVC-<hash>, one per frontend with backends
//	LOCKSTEP-SVC-<hash>:  the i-th of n backends: -m statistic --probability 1/(n-i) -j DNAT
//	POSTROUTING -> LOCKSTEP-SVC-HAIRPIN: -s A -d A --ctstate DNAT -j MASQUERADE, per endpoint address that is a backend
//
// Only what a pod sends from its own address is translated: the nat
// table acts before the filter table's anti-spoofing, and a spoofed packet
// must leave no trace there (an affinity list would record its source for
// the pod it pretends to be); it meets the filter table untranslated and
// is dropped. With ClientIP affinity a frontend's chain first sends a
// client found in a backend's xt_recent list to that backend (--update),
// and every choice adds the client to the chosen backend's list (--set),
// whatever the filter table then decides. The nat table sees
// only a connection's first packet, so the timeout runs from the client's
// last new connection, not its last packet, and a list holds 100 clients
// (xt_recent's ip_list_tot), as with kube-proxy. A pod reaching itself
// through its Service is masqueraded after the filter table judged it,
// with its own address as the source: a pod drops a packet from its own
// address. Frontends without backends are refused as above. The nat
// chains change like the rest: the dispatch chains rule by rule, a
// frontend's chain only when its entry changes.
//
// # Services: the order of commits
//
// iptables-restore commits each table of its payload atomically, at the
// table's COMMIT, one after the other: nat and filter are separate
// tables, and a packet meets nat in PREROUTING and filter in FORWARD, so
// it can meet one state's translation and the other's policy. An Apply
// that changes both therefore commits, in one iptables-restore per
// family:
//
//  1. nat: every frontend narrowed to the backends it has in both states,
//     and no translation for the endpoints that go;
//  2. filter: the new policy;
//  3. nat: the new translation.
//
// A new connection through a Service thus reaches a backend of the old
// state judged by the old policy, a backend of both judged by either, or
// a backend of the new state judged by the new policy: never a backend
// under a policy whose state does not send it there, and never a new pod
// before its chains are in force. A frontend the first commit translates
// to nothing (its backends all change, or it comes or goes) is refused
// meanwhile rather than left to a policy that would judge its ClusterIP
// as a plain address: members join the set of frontends without backends
// in step 1 of the Apply and leave it in step 3, after the commits, so the
// set always holds every frontend left untranslated. An Apply that
// changes only one table commits it alone. This holds for a packet whose
// way from PREROUTING to FORWARD, a few microseconds in one softirq that
// a kernel without PREEMPT_RT does not preempt, spans at most one of the
// commits. Two caveats remain: set members change before the rules, as
// for all traffic (see Apply), and a full reconcile, which starts from a
// state it only read, commits filter then nat without the narrowing.
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
// in the nat table under every dataplane) as chains to keep. The Service
// chains, their jumps from PREROUTING and POSTROUTING and the sets of
// frontends without backends are lockstep's like the rest, and go with
// them; an affinity list goes with the last rule that names it. A full
// reconcile reads the nat table back too and repairs the Service chains
// (LOCKSTEP-SVC-*) and their jumps, never another chain there. Retrying
// and remembering pending clean-ups is agent/cleanup's job.
//
// # Requirements
//
// iptables 1.8.4 or later (legacy and nft variants), ipset 7, and the
// kernel's xt_set, xt_conntrack, xt_multiport, REJECT and
// ip_set_hash_{ip,net,ipport} modules; to translate Services also the nat
// table, xt_nat, MASQUERADE, xt_statistic and xt_recent; CAP_NET_ADMIN. All commands go through a [Runner], so the
// package builds on every platform and tests run it against a fake.
package iptables
