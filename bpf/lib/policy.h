/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Policy lookup: who is the remote end (identity and CIDR class, in the
 * packet's parity) and does the endpoint's inner policy map allow it.
 */
#ifndef LOCKSTEP_POLICY_H
#define LOCKSTEP_POLICY_H

#include "maps.h"
#include "parse.h"

#define PROTO_OTHER 0

struct remote {
	__u32 identity;
	__u32 cidr_class;
};

/* remote_lookup resolves addr in parity p: a known pod address through
 * lockstep_ipcache, anything else is PeerWorld with the class of its
 * longest prefix in lockstep_cidrs.
 */
static __always_inline void remote_lookup(const struct v6addr *addr, __u32 p, struct remote *r)
{
	struct ipcache_value *ic = bpf_map_lookup_elem(&lockstep_ipcache, addr);
	struct cidr_key ck;
	struct cidr_value *cv;

	if (ic) {
		r->identity = ic->identity[p];
		r->cidr_class = ic->cidr_class[p];
		return;
	}
	r->identity = PEER_WORLD;
	r->cidr_class = NO_CIDR_CLASS;
	ck.prefixlen = 128;
	ck.addr = *addr;
	cv = bpf_map_lookup_elem(&lockstep_cidrs, &ck);
	if (cv)
		r->cidr_class = cv->cidr_class[p];
}

static __always_inline __u8 policy_proto(__u8 proto)
{
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP)
		return proto;
	return PROTO_OTHER;
}

/* rule_allows reports whether inner has an entry for peer that covers
 * dport (every port for PROTO_OTHER), and sets *rule to the entry's rule
 * id when it does. A bucketed rule (more ranges than one value holds)
 * costs a second lookup: the bucket of dport; its chunk 0 names the rule.
 */
static __always_inline int rule_allows(void *inner, __u32 peer, __u8 dir, __u8 proto, __u16 dport,
				       __u32 *rule)
{
	struct policy_key k = {
		.peer = peer,
		.dir = dir,
		.proto = proto,
	};
	struct policy_value *v = bpf_map_lookup_elem(inner, &k);
	__u32 n, i, id;

	if (!v)
		return 0;
	id = v->rule;
	if (proto == PROTO_OTHER) {
		*rule = id;
		return 1;
	}
	n = v->nranges;
	if (n & RULE_BUCKETED) {
		k.chunk = 1 + (dport >> RULE_SHIFT(n));
		v = bpf_map_lookup_elem(inner, &k);
		if (!v)
			return 0;
		n = v->nranges;
	}
	n &= 0xffff;
	for (i = 0; i < MAX_PORT_RANGES; i++) {
		if (i >= n)
			break;
		if (dport >= v->ranges[i].lo && dport <= v->ranges[i].hi) {
			*rule = id;
			return 1;
		}
	}
	return 0;
}

/* policy_allows evaluates the endpoint's rules of parity p for the remote
 * end r of packet pk in dir, and sets *rule to the id of the rule that
 * allows it. No inner map means no rule: deny. no_any says the endpoint
 * has no PEER_ANY rule in dir (its EP_*_NO_ANY flag).
 */
static __always_inline int policy_allows(__u32 ifindex, __u32 p, __u8 dir,
					 const struct pkt *pk, const struct remote *r, __u8 no_any,
					 __u32 *rule)
{
	struct policy_outer_key ok = {
		.ifindex = ifindex,
		.parity = p,
	};
	__u8 proto = policy_proto(pk->proto);
	void *inner;

	inner = bpf_map_lookup_elem(&lockstep_policy, &ok);
	if (!inner)
		return 0;
	if (rule_allows(inner, r->identity, dir, proto, pk->dport, rule))
		return 1;
	if (r->cidr_class != NO_CIDR_CLASS &&
	    rule_allows(inner, r->cidr_class, dir, proto, pk->dport, rule))
		return 1;
	if (no_any)
		return 0;
	return rule_allows(inner, PEER_ANY, dir, proto, pk->dport, rule);
}

#endif /* LOCKSTEP_POLICY_H */
