// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The NetworkPolicy programs of one pod endpoint, attached to the host side
 * of the pod's veth: from_pod on tc ingress (traffic the pod sends, policy
 * direction egress), to_pod on tc egress (traffic to the pod, ingress).
 *
 * One object serves every pod of the node: all per-pod state lives in the
 * pinned maps of lib/maps.h, keyed by the host veth's ifindex.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/ct.h"
#include "lib/nd.h"
#include "lib/policy.h"
#include "lib/route.h"
#include "lib/service.h"
#include "lib/verdict.h"

/* addr_ok reports whether the pod of ep may use a as its own address on a
 * packet of protocol proto: one of its addresses, or, for ICMPv6 only, a
 * link-local one (fe80::/10: link-local control traffic, which never
 * leaves the node's link with the pod). The unspecified address is not
 * an address of the pod: see unspec_ok.
 */
static __always_inline int addr_ok(const struct endpoint_info *ep, const struct v6addr *a, __u8 is_v6,
				   __u8 proto)
{
	if (!is_v6)
		return ep->has_v4 && addr_eq(a, &ep->ipv4);
	if (ep->has_v6 && addr_eq(a, &ep->ipv6))
		return 1;
	return proto == IPPROTO_ICMPV6 && addr_linklocal(a);
}

/* handle decides one packet in dir at the endpoint of the host veth the
 * program runs on.
 *
 * A packet of a tracked connection takes the fast path: parse, this CPU's
 * flow cache or one lock-free conntrack lookup, done; it needs neither the
 * endpoint nor the generation. That is safe for anti-spoofing because an
 * entry only ever lets a pod send from an address it was allowed to send
 * from when the entry was made: an egress entry is made after the source
 * check, and an ingress entry only for a packet addressed to the pod
 * itself (its reply will come from that address). An ICMP error quoting a
 * packet of a tracked connection, sent to that packet's source, takes the
 * same path (ct_related). A
 * connection lockstep translates for a Service is translated on that path
 * too (svc_tracked).
 *
 * A new connection the pod opens to a Service frontend is translated to a
 * backend before policy, which then judges the backend (lib/service.h).
 *
 * What no connection licenses: an IPv6 packet from :: (but for duplicate
 * address detection), to ::, or to or from an IPv4-mapped address is dropped
 * (lib/nd.h). Neighbour discovery and MLD the pod sends pass without
 * policy once anti-spoofing has passed them, if they keep to the link as
 * their RFCs say (nd_ok), and are dropped if not; those the node's stack
 * sends the pod pass, forwarded ones are dropped. The node's own packets
 * are the node's to get right: like isolation, none of these rules
 * applies to them.
 */
static __always_inline int handle(struct __sk_buff *skb, __u8 dir)
{
	__u32 zero = 0, ifindex = skb->ifindex;
	struct endpoint_info *ep;
	struct remote r = {};
	struct ct_hit h = {};
	struct svc_value *sv;
	struct state *st;
	struct pkt p = {};
	struct ct_key k;
	__u32 parity, o = 0, rule = 0;
	__u8 flags, isolated, from_node, routed = 0, reason = REASON_ALLOWED_NEW;
	__u64 now = 0;
	__u16 n;
	int res;

	res = parse_packet(skb, &p);
	if (res == PARSE_OK) {
		now = ct_now();
		if (p.icmp_err) {
			struct svc_scratch *s = svc_scratch();
			__u32 qo = 0;

			if (s && ct_related(skb, &p, ifindex, dir, now, &s->in, &qo, &h))
				return svc_related(skb, &p, &s->in, dir, qo, &h);
		}
		o = ct_fill_key(&k, ifindex, &p);
		if (ct_track(&k, o, dir, &p, now, &h)) {
			if (h.flags & CT_SVC)
				return svc_tracked(skb, ifindex, &p, dir, o, &h, now);
			/* A connection with another node's pod. */
			if (dir == DIR_EGRESS && (h.flags & CT_ROUTED))
				return route_out(skb, &p);
			return TC_ACT_OK;
		}
		/* Was this the SYN from_uplink routed? Asked before any
		 * verdict, so no drop leaves the slot behind. */
		if (dir == DIR_INGRESS)
			routed = route_syn_taken(&k, &p);
	}

	st = bpf_map_lookup_elem(&lockstep_state, &zero);
	if (!st)
		return TC_ACT_SHOT;
	/* Read gen once: every lookup below uses this packet's parity. */
	parity = READ_ONCE_GEN(st) & 1;

	ep = bpf_map_lookup_elem(&lockstep_endpoints, &ifindex);
	if (!ep)
		return verdict(skb, dir, VERDICT_DROP, REASON_NO_ENDPOINT, &p, 0);
	if (res == PARSE_PASS)
		return TC_ACT_OK;
	if (res == PARSE_NOT_IP || res == PARSE_BAD_L3)
		return verdict(skb, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
	/* The node's own packets to its pod (see below) are the node's. */
	from_node = dir == DIR_INGRESS && skb->ingress_ifindex == 0;
	if (p.is_v6 && !from_node) {
		if ((addr_unspec(&p.saddr) && !unspec_ok(&p)) || addr_v4mapped(&p.saddr))
			return verdict(skb, dir, VERDICT_DROP, REASON_SPOOFED, &p, 0);
		if (addr_v4mapped(&p.daddr) || addr_unspec(&p.daddr))
			return verdict(skb, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
	}
	if (dir == DIR_EGRESS && !addr_ok(ep, &p.saddr, p.is_v6, p.proto) && !addr_unspec(&p.saddr))
		return verdict(skb, dir, VERDICT_DROP, REASON_SPOOFED, &p, 0);
	if (res == PARSE_ND) {
		if (from_node)
			return TC_ACT_OK;
		/* A forwarded one is invalid: its hop limit was lowered. */
		if (dir == DIR_INGRESS || !nd_ok(&p))
			return verdict(skb, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
		return TC_ACT_OK;
	}

	flags = ep->flags[parity];
	/* Service translation comes before policy, which judges the backend. */
	if (dir == DIR_EGRESS && res == PARSE_OK) {
		sv = svc_lookup(&p, parity, &n);
		if (sv) {
			int act = svc_connect(skb, ifindex, &p, sv, n, parity, flags, now);

			if (act != SVC_PASS)
				return act;
		}
	}
	isolated = flags & (dir == DIR_INGRESS ? EP_INGRESS_ISOLATED : EP_EGRESS_ISOLATED);
	/* A pod never isolates itself from its own node (kubelet probes,
	 * node-local health checks), as Kubernetes documents. A packet the
	 * node's stack sent has no ingress ifindex: the kernel sets skb_iif
	 * only on receive, so locally generated packets (from any process of
	 * the node's namespace, whatever source address it picked, DNATed in
	 * OUTPUT or not, the node's ICMP errors) carry 0, and packets
	 * forwarded from a pod or another node the ifindex they arrived on.
	 * Such a packet is allowed as a new connection of an open direction
	 * would be, tracked so the pod's reply passes an isolated egress. The
	 * pod's egress to the node's addresses is judged like any other.
	 */
	if (isolated && from_node) {
		isolated = 0;
		reason = REASON_ALLOWED_NODE;
	}
	if (res == PARSE_BAD_L4) {
		if (isolated)
			return verdict(skb, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
		return TC_ACT_OK;
	}

	if (isolated) {
		remote_lookup(dir == DIR_EGRESS ? &p.daddr : &p.saddr, parity, &r);
		if (!policy_allows(ifindex, parity, dir, &p, &r,
				   flags & (dir == DIR_INGRESS ? EP_INGRESS_NO_ANY : EP_EGRESS_NO_ANY), &rule))
			return deny(skb, ifindex, dir, &p, r.identity);
	}
	/* Nothing answers ::, which only the node's own packets come from
	 * here: a reply to it is judged, and dropped, as a new packet. */
	if ((dir == DIR_EGRESS || addr_ok(ep, &p.daddr, p.is_v6, p.proto)) && !addr_unspec(&p.saddr)) {
		if (!ct_admit(ifindex, dir, 1, dir == DIR_INGRESS && skb->ingress_ifindex == 0, now))
			return verdict(skb, dir, VERDICT_DROP, REASON_CT_SHARE, &p, r.identity);
		if (dir == DIR_EGRESS)
			routed = route_new(&p, &p.daddr);
		ct_create(&k, o, dir, &p, now, routed ? CT_ROUTED : 0);
	}
	res = verdict_rule(skb, dir, VERDICT_ALLOW, reason, &p, r.identity, rule);
	if (routed && dir == DIR_EGRESS && res == TC_ACT_OK)
		return route_out(skb, &p);
	return res;
}

SEC("tc")
int from_pod(struct __sk_buff *skb)
{
	return handle(skb, DIR_EGRESS);
}

SEC("tc")
int to_pod(struct __sk_buff *skb)
{
	return handle(skb, DIR_INGRESS);
}

/* from_uplink runs on tcx ingress of the node's uplinks (lockstep_uplinks)
 * and sends a packet for a local pod straight to the pod's host veth, past
 * the node's stack, when it belongs to a connection the programs route
 * (CT_ROUTED; lib/route.h), is an ICMP error about one, or is a TCP SYN
 * that opens a new one; to_pod then judges and translates it as any
 * other. Anything else goes on (TCX_NEXT: to the next program on the hook,
 * then the stack) untouched. It decides nothing and counts nothing:
 * policy is to_pod's.
 */
SEC("tc")
int from_uplink(struct __sk_buff *skb)
{
	__u32 in_ifindex = skb->ifindex, pkt_type = skb->pkt_type, vlan = skb->vlan_present, ifindex, o;
	struct endpoint_info *ep;
	struct bpf_fib_lookup fib;
	struct ct_hit h = {};
	struct pkt p = {};
	struct ct_key k;
	__u64 now;
	long rc;
	int act;

	/* A tag the device stripped would go with the packet to the pod. */
	if (pkt_type != 0 /* PACKET_HOST */ || vlan || parse_packet(skb, &p) != PARSE_OK)
		return ROUTE_TCX_NEXT;
	if (!route_pod_addr(&p.daddr))
		return ROUTE_TCX_NEXT;
	rc = route_fib(skb, &p, 0, in_ifindex, &fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return ROUTE_TCX_NEXT;
	ifindex = fib.ifindex;
	ep = bpf_map_lookup_elem(&lockstep_endpoints, &ifindex);
	if (!ep)
		return ROUTE_TCX_NEXT;
	now = ct_now();
	if (p.icmp_err) {
		struct svc_scratch *s = svc_scratch();

		if (!s || !ct_related(skb, &p, ifindex, DIR_INGRESS, now, &s->in, &o, &h))
			return ROUTE_TCX_NEXT;
	} else {
		o = ct_fill_key(&k, ifindex, &p);
		if (!ct_track(&k, o, DIR_INGRESS, &p, now, &h)) {
			if (!route_pure_syn(&p) || !route_syn_ok(ep))
				return ROUTE_TCX_NEXT;
			return route_syn(skb, in_ifindex, &p, &k, &fib, rc);
		}
		/* A SYN-ACK cannot belong to a connection already closing: it
		 * answers a new one with the same ports, which lockstep did not
		 * route (one the node's netfilter translated): neither it nor
		 * the packets after it are routed. */
		if ((p.tcp_flags & TCP_FLAG_SYN) && (h.flags & CT_CLOSING)) {
			route_forget(&k);
			return ROUTE_TCX_NEXT;
		}
	}
	if (!(h.flags & CT_ROUTED))
		return ROUTE_TCX_NEXT;
	act = route_send(skb, &fib, rc, &p);
	return act == TC_ACT_OK ? ROUTE_TCX_NEXT : act;
}

char __license[] SEC("license") = "Dual BSD/GPL";
