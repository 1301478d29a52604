/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Host routing: the packets of a connection between a local pod and a pod
 * of another node skip this node's IP stack, both ways.
 *
 * Out: from_pod, once policy (and Service translation) passed a packet of
 * such a connection, looks its destination up in the node's routing table
 * (bpf_fib_lookup, as the kernel would forward it) and, when the route
 * leaves through an uplink (lockstep_uplinks), sends it there itself: TTL
 * or hop limit lowered as a router does, Ethernet addresses from the
 * neighbour table (bpf_redirect_neigh when the next hop is not resolved
 * yet). In: from_uplink, on the uplinks' tc ingress, sends a packet for a
 * local pod straight to the pod's host veth (where to_pod judges it as
 * before) when it belongs to such a connection, an ICMP error about one,
 * or a TCP SYN that may start one. None passes the node's netfilter
 * (conntrack, kube-proxy's chains) or its routing code: kube-proxy has
 * nothing to do for them, lockstep tracks and judges them itself, and they
 * cost the node less.
 *
 * Which connections: those whose entry says CT_ROUTED. from_pod sets it
 * when it allows a pod's new connection to a pod address
 * (lockstep_ipcache; for a Service, the backend's): never a ClusterIP
 * kube-proxy is to translate, the node, or an address outside the
 * cluster, which may need the node's masquerading. to_pod sets it when it
 * allows a TCP SYN from_uplink brought (lockstep_routed_syn): a SYN to a
 * pod's own address starts a connection no NAT of the node is part of.
 * Other packets that start nothing lockstep knows (a UDP datagram, a
 * reply to a connection kube-proxy translated) take the stack: only its
 * conntrack could tell a new flow from a reply it must translate. A
 * connection leaves the node's stack both ways or not at all, as far as
 * the node's conntrack is concerned (a reply whose request it never saw is
 * invalid to it): from_pod routes only out of the devices from_uplink is
 * attached to.
 *
 * Anything the lookup cannot settle goes to the stack as before: no route,
 * a route not through an uplink, forwarding off, a packet larger than the
 * MTU (the stack answers with the ICMP error), a TTL that would expire.
 * What the stack would have added for these connections and no longer
 * does: netfilter rules on the node's forward path, IPsec policies.
 */
#ifndef LOCKSTEP_ROUTE_H
#define LOCKSTEP_ROUTE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "parse.h"
#include "ct.h"

#define ROUTE_AF_INET 2
#define ROUTE_AF_INET6 10

#define IP4_TTL_OFF (ETH_HLEN + offsetof(struct iphdr, ttl))
#define IP4_CHECK_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP6_HOPLIMIT_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))

/* route_pod_addr reports whether a is a pod address of the cluster. */
static __always_inline int route_pod_addr(const struct v6addr *a)
{
	return bpf_map_lookup_elem(&lockstep_ipcache, a) != NULL;
}

/* route_new reports whether a new connection a pod opens to a should be
 * CT_ROUTED: host routing is on (lockstep_uplinks holds key 0, which no
 * device has, while it lists any uplink) and a is a pod address. Checked
 * once per connection, so that a node without host routing never pays
 * the route lookup per packet.
 */
static __always_inline int route_new(const struct v6addr *a)
{
	__u32 on = 0;

	return bpf_map_lookup_elem(&lockstep_uplinks, &on) && route_pod_addr(a);
}

/* route_fib looks up the route of p, arriving on ifindex, in the node's
 * routing table (its policy rules included) and returns the lookup's
 * BPF_FIB_LKUP_RET_* result. On success fib holds the output device and
 * both Ethernet addresses; on BPF_FIB_LKUP_RET_NO_NEIGH the device and
 * the next hop.
 */
static __always_inline long route_fib(struct __sk_buff *skb, const struct pkt *p, __u32 ifindex,
				      struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->l4_protocol = p->proto;
	fib->sport = bpf_htons(p->sport);
	fib->dport = bpf_htons(p->dport);
	fib->ifindex = ifindex;
	if (p->is_v6) {
		fib->family = ROUTE_AF_INET6;
		__builtin_memcpy(fib->ipv6_src, p->saddr.addr, 16);
		__builtin_memcpy(fib->ipv6_dst, p->daddr.addr, 16);
	} else {
		fib->family = ROUTE_AF_INET;
		__builtin_memcpy(&fib->ipv4_src, &p->saddr.addr[12], 4);
		__builtin_memcpy(&fib->ipv4_dst, &p->daddr.addr[12], 4);
	}
	/* tot_len 0: on success the kernel checks the packet (GSO
	 * included) against the output device's MTU. */
	return bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
}

/* route_send forwards the packet as fib (a route_fib result rc) says and
 * returns the tc action: TC_ACT_OK (the stack forwards it) when it is too
 * large for the device or its TTL would run out, TC_ACT_SHOT when it
 * could not be rewritten.
 */
static __always_inline int route_send(struct __sk_buff *skb, struct bpf_fib_lookup *fib, long rc, __u8 is_v6)
{
	struct bpf_redir_neigh nh = {};
	__u32 mtu = 0;
	__u16 old, new;
	__u8 hl;

	/* route_fib checked the MTU only when the neighbour was known. */
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH && bpf_check_mtu(skb, fib->ifindex, &mtu, 0, 0))
		return TC_ACT_OK;
	if (is_v6) {
		if (bpf_skb_load_bytes(skb, IP6_HOPLIMIT_OFF, &hl, 1) || hl <= 1)
			return TC_ACT_OK;
		hl--;
		if (bpf_skb_store_bytes(skb, IP6_HOPLIMIT_OFF, &hl, 1, 0))
			return TC_ACT_SHOT;
	} else {
		/* TTL and protocol are one 16-bit word of the header checksum. */
		if (bpf_skb_load_bytes(skb, IP4_TTL_OFF, &old, 2) || ((__u8 *)&old)[0] <= 1)
			return TC_ACT_OK;
		new = old;
		((__u8 *)&new)[0]--;
		if (bpf_l3_csum_replace(skb, IP4_CHECK_OFF, old, new, 2) ||
		    bpf_skb_store_bytes(skb, IP4_TTL_OFF, &new, 2, 0))
			return TC_ACT_SHOT;
	}
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, fib->dmac, ETH_ALEN, 0) ||
		    bpf_skb_store_bytes(skb, ETH_ALEN, fib->smac, ETH_ALEN, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib->ifindex, 0);
	}
	nh.nh_family = fib->family;
	if (is_v6)
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	else
		nh.ipv4_nh = fib->ipv4_dst;
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

/* route_syn sends the TCP SYN of key k, which opens no connection
 * lockstep knows, to the host veth fib found (a route_fib result rc),
 * leaving k in this CPU's lockstep_routed_syn slot for to_pod, which the
 * redirect runs at once: it marks the entry it makes CT_ROUTED. The slot
 * is cleared when the packet takes the stack after all.
 */
static __always_inline int route_syn(struct __sk_buff *skb, const struct ct_key *k,
				     struct bpf_fib_lookup *fib, long rc, __u8 is_v6)
{
	struct ct_key *slot;
	__u32 zero = 0;
	int act;

	slot = bpf_map_lookup_elem(&lockstep_routed_syn, &zero);
	if (!slot)
		return TC_ACT_OK;
	*slot = *k;
	act = route_send(skb, fib, rc, is_v6);
	if (act != TC_ACT_REDIRECT)
		slot->ifindex = 0;
	return act;
}

/* route_pure_syn reports whether p is a TCP SYN that opens a connection:
 * no ACK, RST or FIN. */
static __always_inline int route_pure_syn(const struct pkt *p)
{
	return p->proto == IPPROTO_TCP &&
	       (p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_RST | TCP_FLAG_FIN)) == TCP_FLAG_SYN;
}

/* route_syn_taken reports, in to_pod, whether p of key k is the SYN
 * from_uplink just routed (route_syn), and empties the slot. */
static __always_inline int route_syn_taken(const struct ct_key *k, const struct pkt *p)
{
	struct ct_key *slot;
	__u32 zero = 0;
	int hit;

	if (!route_pure_syn(p))
		return 0;
	slot = bpf_map_lookup_elem(&lockstep_routed_syn, &zero);
	if (!slot || !slot->ifindex)
		return 0;
	hit = ct_key_eq(slot, k);
	slot->ifindex = 0;
	return hit;
}

/* route_out sends t, a packet from_pod passed (as translated, when it
 * was), of a CT_ROUTED connection, out of the uplink its
 * route leaves through, and returns the tc action: TC_ACT_OK leaves it to
 * the node's stack. A global function: the verifier checks it once, and
 * its frame (the lookup's 64 bytes) is not from_pod's.
 */
__attribute__((noinline)) int route_out(struct __sk_buff *skb, const struct pkt *t)
{
	struct bpf_fib_lookup fib;
	__u32 out;
	long rc;

	if (!skb || !t)
		return TC_ACT_OK;
	rc = route_fib(skb, t, skb->ifindex, &fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;
	out = fib.ifindex;
	if (!bpf_map_lookup_elem(&lockstep_uplinks, &out))
		return TC_ACT_OK;
	return route_send(skb, &fib, rc, t->is_v6);
}

#endif /* LOCKSTEP_ROUTE_H */
