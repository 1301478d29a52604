// Package masquerade lets pods reach addresses outside the cluster: what a
// pod sends to a destination that is neither a pod CIDR of the cluster nor
// in the non-masquerade list leaves the node with the node's address
// (netfilter MASQUERADE), because nothing outside the cluster has a route
// back to the pod CIDRs. Traffic between pods, on this node or another,
// keeps the pod's address, so NetworkPolicy on the receiving node still
// sees who sent it.
//
// # The rules
//
// One chain, [ChainName], in the nat table of both families, jumped to by
// one rule inserted first in POSTROUTING:
//
//	-A POSTROUTING -m comment --comment "lockstep: ..." -j LOCKSTEP-MASQ
//	-A LOCKSTEP-MASQ -d 10.244.0.0/16 -j RETURN      cluster pod CIDRs, the
//	-A LOCKSTEP-MASQ -d 172.16.0.0/12 -j RETURN      non-masquerade list, the pools
//	-A LOCKSTEP-MASQ -s 10.244.3.0/24 -j MASQUERADE  one per pool of the node
//
// A family whose pools are all of the other family has neither chain nor
// jump. MASQUERADE picks the address of the interface the packet leaves
// by, and conntrack keeps the translation for the connection's life.
//
// The rules are written with the iptables-restore of the node's iptables
// mode (legacy or nft), detected as agent/iptables does ([iptables.Detect])
// and through its [iptables.Runner]; every write is one --noflush commit
// per family, so the chain is never seen half-written. [Sync] reads the
// chain back first and writes only what differs; [Manager] syncs on every
// change, retries failures with backoff, and syncs on the agent's periodic
// resync, which repairs a deleted jump or an edited chain. [Remove]
// deletes the chain and its jumps, for --masquerade=false, for the mode a
// node stopped using, and for `lockstep uninstall`.
//
// The chain's name starts with LOCKSTEP- like the iptables dataplane's
// chains: its rules do not count as the node's own when iptables.Detect
// votes, and iptables.Purge of a mode removes it. An agent keeps it out of
// the clean-up of the mode it masquerades in ([Chains], the keep argument
// of iptables.Purge): the eBPF dataplane leaves policy chains of both
// modes to clean while it masquerades in one of them.
//
// # With the eBPF dataplane too
//
// Both dataplanes masquerade this way, as Cilium does with BPF
// masquerading off: the kernel's NAT does it, not the eBPF programs. The
// programs sit on the pods' host-side veths (tc ingress for what a pod
// sends, tc egress for what it receives), so they judge the pod's original
// addresses: a packet is judged by from_pod before routing and only then
// reaches POSTROUTING and its SNAT, and a reply is de-NATed by conntrack
// in PREROUTING, on the interface it arrives by, before it is routed to
// the pod's veth where to_pod judges it. The iptables dataplane's filter
// chains see the same addresses (FORWARD comes before POSTROUTING and
// after PREROUTING). Policy therefore never sees the node's address in
// place of a pod's, and lockstep's own conntrack (eBPF) tracks the pod's
// side of the connection.
//
// # What counts as the cluster
//
// Standalone, the cluster is the agent's --pool-cidr pools. In Kubernetes
// mode it is the union of every node's NodeIPAM blocks: this node's pools
// (from the store, draining ones included) and the blocks of every other
// node, which the agent already learns from the API server to route them
// (agent/routes); --cluster-cidr adds ranges in either mode. That is the
// simpler of the two correct choices: the agent already has the blocks,
// while the CIDRs of every IPPool would need another watch and read access
// to IPPools for every agent. And it is correct: every pod address is in a
// block some NodeIPAM holds, so the union covers every pod the node can
// reach without NAT; an address of an IPPool that is in no block the node
// knows is not routed to any node, its packets leave by the default route
// like any outside destination, and masquerading them is what lets a reply
// come back at all.
//
// One ordering matters: a block must stop being masqueraded before it is
// routed, or connections opened in between would reach the other node
// with this node's address for their whole life. The agent therefore syncs
// the masquerade rules before it hands a new set of blocks to the routes
// manager. Passing the IPPool CIDRs as --cluster-cidr removes even that
// window.
//
// # Requirements
//
// The iptables tools of the node's mode (1.8.4 or later) and the kernel's
// NAT for both families (nf_nat, iptable_nat or nft_chain_nat,
// ip6table_nat, xt_MASQUERADE or nft_masq); CAP_NET_ADMIN.
package masquerade
