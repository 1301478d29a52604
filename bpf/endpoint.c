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
#include "lib/policy.h"
#include "lib/verdict.h"

/* source_ok is anti-spoofing: a pod may only send from its own addresses,
 * except ICMPv6 from :: or fe80::/10 (duplicate address detection, link-local
 * control traffic).
 */
static __always_inline int source_ok(const struct endpoint_info *ep, const struct pkt *p)
{
	const __u8 *s = p->saddr.addr;

	if (!p->is_v6)
		return ep->has_v4 && addr_eq(&p->saddr, &ep->ipv4);
	if (ep->has_v6 && addr_eq(&p->saddr, &ep->ipv6))
		return 1;
	if (p->proto != IPPROTO_ICMPV6)
		return 0;
	if (s[0] == 0xfe && (s[1] & 0xc0) == 0x80)
		return 1;
	{
		const __u64 *w = (const __u64 *)s;

		return w[0] == 0 && w[1] == 0;
	}
}

static __always_inline int handle(struct __sk_buff *skb, __u8 dir)
{
	__u32 zero = 0, ifindex = skb->ifindex;
	struct state *st = bpf_map_lookup_elem(&lockstep_state, &zero);
	__u32 *mon = bpf_map_lookup_elem(&lockstep_monitor, &zero);
	struct endpoint_info *ep;
	struct remote r = {};
	struct pkt p = {};
	__u32 parity, monitor;
	__u8 isolated;
	__u64 now;
	int res;

	if (!st || !mon)
		return TC_ACT_SHOT;
	/* Read gen once: every lookup below uses this packet's parity. */
	parity = READ_ONCE_GEN(st) & 1;
	monitor = *mon;

	ep = bpf_map_lookup_elem(&lockstep_endpoints, &ifindex);
	if (!ep)
		return verdict(skb, monitor, dir, VERDICT_DROP, REASON_NO_ENDPOINT, &p, 0);

	res = parse_packet(skb, &p);
	if (res == PARSE_PASS)
		return TC_ACT_OK;
	if (res == PARSE_NOT_IP || res == PARSE_BAD_L3)
		return verdict(skb, monitor, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
	if (dir == DIR_EGRESS && !source_ok(ep, &p))
		return verdict(skb, monitor, dir, VERDICT_DROP, REASON_SPOOFED, &p, 0);

	isolated = ep->flags[parity] & (dir == DIR_INGRESS ? EP_INGRESS_ISOLATED : EP_EGRESS_ISOLATED);
	if (res == PARSE_BAD_L4) {
		if (isolated)
			return verdict(skb, monitor, dir, VERDICT_DROP, REASON_UNPARSEABLE, &p, 0);
		return TC_ACT_OK;
	}

	now = bpf_ktime_get_ns();
	if (ct_lookup(ifindex, dir, &p, now))
		return TC_ACT_OK;

	if (isolated) {
		remote_lookup(dir == DIR_EGRESS ? &p.daddr : &p.saddr, parity, &r);
		if (!policy_allows(ifindex, parity, dir, &p, &r))
			return verdict(skb, monitor, dir, VERDICT_DROP,
				       dir == DIR_INGRESS ? REASON_POLICY_INGRESS : REASON_POLICY_EGRESS,
				       &p, r.identity);
	}
	ct_create(ifindex, dir, &p, now);
	return verdict(skb, monitor, dir, VERDICT_ALLOW, REASON_ALLOWED_NEW, &p, r.identity);
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

char __license[] SEC("license") = "Dual BSD/GPL";
