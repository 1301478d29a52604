/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Verdict bookkeeping: per-reason counters and, while `lockstep monitor`
 * runs (lockstep_monitor[0] != 0), one ring buffer event per verdict.
 */
#ifndef LOCKSTEP_VERDICT_H
#define LOCKSTEP_VERDICT_H

#include <linux/pkt_cls.h>

#include "maps.h"
#include "parse.h"

static __always_inline void count(__u32 reason, __u32 len)
{
	struct counter *c = bpf_map_lookup_elem(&lockstep_drops, &reason);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

/* count_rule counts a new connection the rule of id allowed; ids past
 * the map and 0 (no rule) count nothing. */
static __always_inline void count_rule(__u32 id)
{
	__u64 *c;

	if (!id)
		return;
	c = bpf_map_lookup_elem(&lockstep_rule_allowed, &id);
	if (c)
		(*c)++;
}

/* count_denied counts a packet the isolated direction dir of the
 * endpoint of ifindex dropped by default deny, making its slot on the
 * first drop (a full map counts nothing). */
static __always_inline void count_denied(__u32 ifindex, __u8 dir)
{
	__u32 key = ifindex << 1 | dir;
	__u64 *c = bpf_map_lookup_elem(&lockstep_denied, &key);

	if (!c) {
		__u64 zero = 0;

		bpf_map_update_elem(&lockstep_denied, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&lockstep_denied, &key);
		if (!c)
			return;
	}
	(*c)++;
}

static __always_inline void emit(__u32 ifindex, __u8 dir, __u8 verdict, __u8 reason,
				 const struct pkt *p, __u32 peer, __u32 rule)
{
	struct event *e = bpf_ringbuf_reserve(&lockstep_events, sizeof(*e), 0);

	if (!e)
		return;
	e->ifindex = ifindex;
	e->dir = dir;
	e->verdict = verdict;
	e->reason = reason;
	e->proto = p->proto;
	e->sport = p->sport;
	e->dport = p->dport;
	e->peer = peer;
	e->saddr = p->saddr;
	e->daddr = p->daddr;
	e->rule = rule;
	bpf_ringbuf_submit(e, 0);
}

/* verdict_rule counts and reports the outcome of one packet, which the
 * policy rule of id rule decided (0: none did), and returns the tc action
 * that enforces it.
 */
static __always_inline int verdict_rule(struct __sk_buff *skb, __u8 dir, __u8 v, __u8 reason,
					const struct pkt *p, __u32 peer, __u32 rule)
{
	__u32 zero = 0;
	__u32 *monitor = bpf_map_lookup_elem(&lockstep_monitor, &zero);

	count(reason, skb->len);
	if (v == VERDICT_ALLOW)
		count_rule(rule);
	if (monitor && *monitor)
		emit(skb->ifindex, dir, v, reason, p, peer, rule);
	return v == VERDICT_ALLOW ? TC_ACT_OK : TC_ACT_SHOT;
}

/* deny drops a packet that the endpoint's isolated direction dir allows
 * no rule for (default deny), counting it for the endpoint, and reports
 * it as verdict does; peer is the remote end's identity. */
static __always_inline int deny(struct __sk_buff *skb, __u32 ifindex, __u8 dir, const struct pkt *p,
				__u32 peer)
{
	count_denied(ifindex, dir);
	return verdict_rule(skb, dir, VERDICT_DROP,
			    dir == DIR_INGRESS ? REASON_POLICY_INGRESS : REASON_POLICY_EGRESS, p, peer, 0);
}

/* verdict is verdict_rule for an outcome no policy rule decided. */
static __always_inline int verdict(struct __sk_buff *skb, __u8 dir, __u8 v, __u8 reason,
				   const struct pkt *p, __u32 peer)
{
	return verdict_rule(skb, dir, v, reason, p, peer, 0);
}

#endif /* LOCKSTEP_VERDICT_H */
