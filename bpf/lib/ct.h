/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Connection tracking: lockstep_ct remembers the original tuple of every
 * connection allowed at an endpoint in a direction, so later packets of it
 * and its replies (the reversed tuple, opposite direction) skip policy.
 */
#ifndef LOCKSTEP_CT_H
#define LOCKSTEP_CT_H

#include "maps.h"
#include "parse.h"

#define NSEC_PER_SEC 1000000000ULL
#define CT_TIMEOUT_TCP (2ULL * 3600 * NSEC_PER_SEC) /* once a packet carried ACK */
#define CT_TIMEOUT_OTHER (60ULL * NSEC_PER_SEC)      /* UDP, SCTP, ICMP, TCP SYN */
#define CT_REFRESH_SLACK (1ULL * NSEC_PER_SEC)     /* refresh at most ~once a second */

static __always_inline __u64 ct_timeout(const struct pkt *p)
{
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_FLAG_ACK))
		return CT_TIMEOUT_TCP;
	return CT_TIMEOUT_OTHER;
}

static __always_inline void ct_fill_key(struct ct_key *k, __u32 ifindex, __u8 dir,
					const struct pkt *p, int reverse)
{
	k->ifindex = ifindex;
	k->dir = dir;
	k->proto = p->proto;
	k->pad = 0;
	if (reverse) {
		k->sport = p->dport;
		k->dport = p->sport;
		k->saddr = p->daddr;
		k->daddr = p->saddr;
	} else {
		k->sport = p->sport;
		k->dport = p->dport;
		k->saddr = p->saddr;
		k->daddr = p->daddr;
	}
}

/* ct_hit reports whether key names a live connection, refreshing it. */
static __always_inline int ct_hit(const struct ct_key *k, __u64 now, __u64 timeout)
{
	struct ct_entry *e = bpf_map_lookup_elem(&lockstep_ct, k);

	if (!e)
		return 0;
	if (e->expires < now)
		return 0;
	if (now + timeout > e->expires + CT_REFRESH_SLACK)
		e->expires = now + timeout;
	return 1;
}

/* ct_lookup reports whether p belongs to a connection allowed earlier at
 * ifindex: in dir (same tuple) or as the reply of one allowed in the
 * opposite direction (reversed tuple).
 */
static __always_inline int ct_lookup(__u32 ifindex, __u8 dir, const struct pkt *p, __u64 now)
{
	struct ct_key k;
	__u64 timeout = ct_timeout(p);

	ct_fill_key(&k, ifindex, dir, p, 0);
	if (ct_hit(&k, now, timeout))
		return 1;
	ct_fill_key(&k, ifindex, dir ^ 1, p, 1);
	return ct_hit(&k, now, timeout);
}

static __always_inline void ct_create(__u32 ifindex, __u8 dir, const struct pkt *p, __u64 now)
{
	struct ct_key k;
	struct ct_entry e = {
		.expires = now + ct_timeout(p),
	};

	ct_fill_key(&k, ifindex, dir, p, 0);
	bpf_map_update_elem(&lockstep_ct, &k, &e, BPF_ANY);
}

#endif /* LOCKSTEP_CT_H */
