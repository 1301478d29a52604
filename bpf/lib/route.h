/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Host routing: the packets of a connection a pod opened to another
 * node's pod skip the node's IP stack on this node, both ways.
 *
 * Out: from_pod, once policy (and Service translation) passed a packet of
 * such a connection, looks its destination up in the node's routing table
 * (bpf_fib_lookup, as the kernel would forward it) and, when the route
 * leaves through an uplink (lockstep_uplinks), sends it there itself: TTL
 * or hop limit lowered as a router does, Ethernet addresses from the
 * neighbour table (bpf_redirect_neigh when the next hop is not resolved
 * yet). In: from_uplink, on the uplinks' tc ingress, sends a packet for a
 * local pod straight to the pod's host veth (where to_pod judges it as
 * before) when it belongs to such a connection, and an ICMP error about
 * one. Neither passes the node's netfilter (conntrack, kube-proxy's
 * chains) or its routing code: kube-proxy has nothing to do for them,
 * lockstep tracks and judges them itself, and they cost the node less.
 *
 * Which connections: those whose entry says CT_ROUTED, set when the pod's
 * first packet was allowed and its destination (the backend, for a
 * Service) is a pod address (lockstep_ipcache): never a ClusterIP kube-
 * proxy is to translate, the node, or an address outside the cluster,
 * which may need the node's masquerading. Connections opened towards the
 * pod keep the node's stack both ways (its netfilter saw their first
 * packet). A packet leaves the stack only both ways or not at all for a
 * connection as far as the node's conntrack is concerned: a reply the
 * node's conntrack never saw the request of would be invalid to it, so
 * from_pod routes only out of devices from_uplink is attached to.
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

/* route_out sends t, a packet from_pod passed (as translated, when it
 * was), of a CT_ROUTED connection the pod opened, out of the uplink its
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
