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
 * yet). In: from_uplink, on the uplinks' tcx ingress, sends a packet for
 * a local pod straight to the pod's host veth (where to_pod judges it as
 * before) when it belongs to such a connection, an ICMP error about one,
 * or a TCP SYN that may start one. None passes the node's netfilter
 * (conntrack, kube-proxy's chains) or its routing code: kube-proxy has
 * nothing to do for them, lockstep tracks and judges them itself, and they
 * cost the node less.
 *
 * Which connections: TCP ones whose entry says CT_ROUTED. from_pod sets
 * it when it allows a pod's TCP SYN to a pod address
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
 * a route not through an uplink, forwarding off, a fragment, a packet over
 * the MTU (the stack answers with the ICMP error), a TTL about to expire.
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
#include "nat.h"

#define ROUTE_AF_INET 2
#define ROUTE_AF_INET6 10

#define IP4_TTL_OFF (ETH_HLEN + offsetof(struct iphdr, ttl))
#define IP6_HOPLIMIT_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))

/* ROUTE_TCX_NEXT: a tcx program's "not mine, run the next" (TCX_NEXT,
 * which uapi headers before Linux 6.6 lack). */
#define ROUTE_TCX_NEXT (-1)

/* route_pure_syn reports whether p is a TCP SYN that opens a connection:
 * no ACK, RST or FIN. */
static __always_inline int route_pure_syn(const struct pkt *p)
{
	return p->proto == IPPROTO_TCP &&
	       (p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_RST | TCP_FLAG_FIN)) == TCP_FLAG_SYN;
}

/* route_pod_addr reports whether a is a pod address of the cluster. */
static __always_inline int route_pod_addr(const struct v6addr *a)
{
	return bpf_map_lookup_elem(&lockstep_ipcache, a) != NULL;
}

/* route_on reports whether host routing is on: lockstep_uplinks holds key
 * 0, which no device has, while it lists any uplink. */
static __always_inline int route_on(void)
{
	__u32 on = 0;

	return bpf_map_lookup_elem(&lockstep_uplinks, &on) != NULL;
}

/* route_new reports whether the new connection p a pod opens to dst (the
 * backend, for a Service) is to be CT_ROUTED: host routing is on, p is
 * the SYN of a TCP connection, and dst is a pod address. Only a SYN: a
 * packet that makes an entry mid-connection (the entry expired or was
 * evicted) may belong to a connection the node's netfilter translated
 * (a hostPort, a NodePort), which must stay with it. Checked once per
 * connection, so a node without host routing never pays the route lookup
 * per packet.
 */
static __always_inline int route_new(const struct pkt *p, const struct v6addr *dst)
{
	return route_pure_syn(p) && route_on() && route_pod_addr(dst);
}

/* route_fib looks up the route of a packet from src to dst (p's protocol
 * and ports, swapped when rev), arriving on ifindex, in the node's
 * routing table (its policy rules included) and returns the lookup's
 * BPF_FIB_LKUP_RET_* result. On success fib holds the output device and
 * both Ethernet addresses; on BPF_FIB_LKUP_RET_NO_NEIGH the device and
 * the next hop.
 */
static __always_inline long route_fib(struct __sk_buff *skb, const struct pkt *p, int rev, __u32 ifindex,
				      struct bpf_fib_lookup *fib)
{
	const struct v6addr *src = rev ? &p->daddr : &p->saddr, *dst = rev ? &p->saddr : &p->daddr;

	__builtin_memset(fib, 0, sizeof(*fib));
	fib->l4_protocol = p->proto;
	fib->sport = bpf_htons(rev ? p->dport : p->sport);
	fib->dport = bpf_htons(rev ? p->sport : p->dport);
	fib->ifindex = ifindex;
	if (p->is_v6) {
		fib->family = ROUTE_AF_INET6;
		__builtin_memcpy(fib->ipv6_src, src->addr, 16);
		__builtin_memcpy(fib->ipv6_dst, dst->addr, 16);
	} else {
		fib->family = ROUTE_AF_INET;
		__builtin_memcpy(&fib->ipv4_src, &src->addr[12], 4);
		__builtin_memcpy(&fib->ipv4_dst, &dst->addr[12], 4);
	}
	/* tot_len 0: the MTU is route_send's to check (bpf_check_mtu, which
	 * knows GSO packets). */
	return bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
}

/* route_fragment reports whether the packet p is a fragment: those take
 * the stack, whose conntrack reassembles them, all of a datagram alike. */
static __always_inline int route_fragment(struct __sk_buff *skb, const struct pkt *p)
{
	__u16 frag_off;

	if (p->is_v6)
		return p->frag;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, frag_off), &frag_off, 2))
		return 1;
	return (frag_off & bpf_htons(0x3fff)) != 0; /* MF or an offset */
}

/* route_send forwards the packet p as fib (a route_fib result rc) says and
 * returns the tc action: TC_ACT_OK (the stack forwards it) when it is a
 * fragment, too large for the device (the stack answers with the ICMP
 * error) or its TTL would run out, TC_ACT_SHOT when it could not be
 * rewritten.
 */
static __always_inline int route_send(struct __sk_buff *skb, struct bpf_fib_lookup *fib, long rc,
				      const struct pkt *p)
{
	struct bpf_redir_neigh nh = {};
	__u32 mtu = 0;
	__u16 old, new;
	__u8 hl;

	if (route_fragment(skb, p) || bpf_check_mtu(skb, fib->ifindex, &mtu, 0, 0))
		return TC_ACT_OK;
	if (p->is_v6) {
		if (bpf_skb_load_bytes(skb, IP6_HOPLIMIT_OFF, &hl, 1) || hl <= 1)
			return TC_ACT_OK;
		hl--;
		/* The hop limit is in no checksum but a CHECKSUM_COMPLETE sum. */
		if (bpf_skb_store_bytes(skb, IP6_HOPLIMIT_OFF, &hl, 1, BPF_F_RECOMPUTE_CSUM))
			return TC_ACT_SHOT;
	} else {
		/* TTL and protocol are one 16-bit word of the header checksum. */
		if (bpf_skb_load_bytes(skb, IP4_TTL_OFF, &old, 2) || ((__u8 *)&old)[0] <= 1)
			return TC_ACT_OK;
		new = old;
		((__u8 *)&new)[0]--;
		if (bpf_l3_csum_replace(skb, IP4_CSUM_OFF, old, new, 2) ||
		    bpf_skb_store_bytes(skb, IP4_TTL_OFF, &new, 2, 0))
			return TC_ACT_SHOT;
	}
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, fib->dmac, ETH_ALEN, 0) ||
		    bpf_skb_store_bytes(skb, ETH_ALEN, fib->smac, ETH_ALEN, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib->ifindex, 0);
	}
	/* The next hop's family is the route's (an IPv4 route may have an
	 * IPv6 gateway). */
	nh.nh_family = fib->family;
	if (fib->family == ROUTE_AF_INET6)
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	else
		nh.ipv4_nh = fib->ipv4_dst;
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

/* route_syn_ok reports whether the endpoint ep takes routed SYNs
 * (EP_ROUTED_SYN, in the live parity). */
static __always_inline int route_syn_ok(const struct endpoint_info *ep)
{
	struct state *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&lockstep_state, &zero);
	return st && (ep->flags[READ_ONCE_GEN(st) & 1] & EP_ROUTED_SYN);
}

/* route_syn sends the TCP SYN p of key k, which opens no connection
 * lockstep knows, arriving on uplink in_ifindex, to the host veth fib
 * found (a route_fib result rc), when host routing can take the whole
 * connection: it is on, the pod's neighbour entry is known (a SYN queued
 * for neighbour discovery would reach to_pod later, maybe on another CPU),
 * and the pod's replies would leave through the uplink the SYN came in on
 * (strict reverse path: a SYN claiming to come from a local pod or the
 * node, or from a network routed elsewhere, keeps to the stack and its
 * source checks). It leaves k in this CPU's lockstep_routed_syn slot for
 * to_pod, which the redirect runs at once: it marks the entry it makes
 * CT_ROUTED. Returns the tc action, ROUTE_TCX_NEXT when the SYN takes the
 * stack.
 */
static __always_inline int route_syn(struct __sk_buff *skb, __u32 in_ifindex, const struct pkt *p,
				     const struct ct_key *k, struct bpf_fib_lookup *fib, long rc)
{
	struct bpf_fib_lookup back;
	struct ct_key *slot;
	__u32 zero = 0, out;
	int act;

	if (rc != BPF_FIB_LKUP_RET_SUCCESS || !route_on())
		return ROUTE_TCX_NEXT;
	rc = route_fib(skb, p, 1, fib->ifindex, &back);
	out = back.ifindex;
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || out != in_ifindex ||
	    !bpf_map_lookup_elem(&lockstep_uplinks, &out))
		return ROUTE_TCX_NEXT;
	slot = bpf_map_lookup_elem(&lockstep_routed_syn, &zero);
	if (!slot)
		return ROUTE_TCX_NEXT;
	*slot = *k;
	act = route_send(skb, fib, BPF_FIB_LKUP_RET_SUCCESS, p);
	if (act == TC_ACT_REDIRECT)
		return act;
	slot->ifindex = 0;
	return act == TC_ACT_OK ? ROUTE_TCX_NEXT : act;
}

/* route_forget takes CT_ROUTED off the entries of key k in both tables:
 * a SYN-ACK found k's connection closing, so a new connection with the
 * same ports has begun that lockstep did not route (the node's netfilter
 * translated it), and its packets must reach the stack. The flow cache
 * holds no closing entry, so none routes on from a copy.
 */
static __always_inline void route_forget(const struct ct_key *k)
{
	struct svc_ct_entry *s;
	struct ct_entry *v;

	v = bpf_map_lookup_elem(&lockstep_ct, k);
	if (v)
		__sync_fetch_and_and(&v->flags, ~CT_ROUTED);
	s = bpf_map_lookup_elem(&lockstep_svc_ct, k);
	if (s)
		__sync_fetch_and_and(&s->flags, ~CT_ROUTED);
}

/* route_syn_taken reports, in to_pod, whether p of key k is the SYN
 * from_uplink just routed (route_syn), and empties the slot. It runs on
 * every new packet to_pod judges, before any verdict, so that a SYN it
 * drops leaves no slot behind for a later one of the same key.
 */
static __always_inline int route_syn_taken(const struct ct_key *k, const struct pkt *p)
{
	struct ct_key *slot;
	__u32 zero = 0;
	int hit;

	slot = bpf_map_lookup_elem(&lockstep_routed_syn, &zero);
	if (!slot || !slot->ifindex)
		return 0;
	hit = route_pure_syn(p) && ct_key_eq(slot, k);
	slot->ifindex = 0;
	return hit;
}

/* route_out sends t, a packet from_pod passed (as translated, when it
 * was), of a CT_ROUTED connection, out of the uplink its route leaves
 * through, and returns the tc action: TC_ACT_OK leaves it to the node's
 * stack. A global function: the verifier checks it once, and its frame
 * (the lookup's 64 bytes) is not from_pod's.
 */
__attribute__((noinline)) int route_out(struct __sk_buff *skb, const struct pkt *t)
{
	struct bpf_fib_lookup fib;
	__u32 out;
	long rc;

	if (!skb || !t)
		return TC_ACT_OK;
	rc = route_fib(skb, t, 0, skb->ifindex, &fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;
	out = fib.ifindex;
	if (!bpf_map_lookup_elem(&lockstep_uplinks, &out))
		return TC_ACT_OK;
	return route_send(skb, &fib, rc, t);
}

#endif /* LOCKSTEP_ROUTE_H */
