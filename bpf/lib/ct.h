/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Connection tracking: lockstep_ct has one entry per connection seen at an
 * endpoint, keyed by its two ends in a canonical order, so that a packet and
 * its reply find the same entry with one lookup. The entry's flags record in
 * which direction, and with which end as the sender, a packet was allowed
 * as a new connection: later packets of that orientation in that direction,
 * and their replies (the other orientation, in the other direction), skip
 * policy.
 */
#ifndef LOCKSTEP_CT_H
#define LOCKSTEP_CT_H

#include "maps.h"
#include "parse.h"

#define NSEC_PER_SEC 1000000000ULL
#define CT_TIMEOUT_TCP (2ULL * 3600 * NSEC_PER_SEC) /* once a packet carried ACK */
#define CT_TIMEOUT_OTHER (60ULL * NSEC_PER_SEC)      /* UDP, SCTP, ICMP, TCP SYN */
#define CT_TIMEOUT_FIN (120ULL * NSEC_PER_SEC)       /* TCP, once a FIN was seen */
#define CT_TIMEOUT_RST (10ULL * NSEC_PER_SEC)        /* TCP, once a RST was seen */
#define CT_REFRESH_SLACK (1ULL * NSEC_PER_SEC)     /* refresh at most ~once a second */

/* Closing TCP connections, as netfilter's conntrack closes them, without
 * its window checks. A FIN or RST of a tracked connection marks its entry
 * (CT_FIN, CT_RST, in either table) and brings its deadline in to
 * CT_TIMEOUT_FIN or CT_TIMEOUT_RST; later packets move it out again by at
 * most that much, never back to CT_TIMEOUT_TCP. A pure SYN (no ACK, FIN or
 * RST) that finds a closing entry is a new connection reusing the
 * four-tuple: it is not tracked, so policy judges it and a Service
 * translates it anew, and its entries replace the old ones. A SYN of a
 * connection still opening (a retransmission) finds an entry without the
 * marks and keeps its backend. A packet whose tuple has a closing entry in
 * lockstep_ct and a live one, not closing, in lockstep_svc_ct belongs to
 * a translated connection that reuses the tuple of an untranslated one
 * closed before: the translated entry decides. Packets with SYN, FIN or RST never use the
 * flow cache, FIN and RST drop this CPU's slot, and a closing entry is
 * never cached: the marks are only ever read from the table. A forged FIN
 * or RST that matches a connection's four-tuple only makes policy judge
 * the connection again sooner; it never lets anything through.
 */
#define TCP_FLAGS_CT (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)

/* ct_reopens reports whether a packet with TCP flags tcpf starts a new
 * connection over an entry of flags f: a pure SYN over a closing entry.
 */
static __always_inline int ct_reopens(__u32 f, __u8 tcpf)
{
	return (f & CT_CLOSING) && (tcpf & (TCP_FLAGS_CT | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
}

/* ct_refresh updates the deadline *e and flags *f of an entry a packet
 * with TCP flags tcpf hit: moves the deadline out to expires (0: leave the
 * entry alone) when that is more than CT_REFRESH_SLACK later; marks the
 * entry closing on a FIN or RST, and caps a closing entry's deadline (see
 * above), moving it in at once when the packet marked it. It returns
 * whether the deadline moved out.
 */
static __always_inline int ct_refresh(__u64 *e, __u32 *f, __u8 tcpf, __u64 expires, __u64 now)
{
	__u32 closing = *f & CT_CLOSING;
	__u64 cap;

	if (!expires)
		return 0;
	if (!closing && !(tcpf & (TCP_FLAG_FIN | TCP_FLAG_RST))) {
		if (expires <= *e + CT_REFRESH_SLACK)
			return 0;
		*e = expires;
		return 1;
	}
	if (tcpf & TCP_FLAG_RST)
		closing |= CT_RST;
	if (tcpf & TCP_FLAG_FIN)
		closing |= CT_FIN;
	cap = now + ((closing & CT_RST) ? CT_TIMEOUT_RST : CT_TIMEOUT_FIN);
	if (expires > cap)
		expires = cap;
	if (closing & ~*f) {
		/* Written through the element: should the LRU have recycled it
		 * for another key meanwhile, that connection is judged by
		 * policy again sooner; no allowed bit moves. */
		*f |= closing;
		*e = expires;
		return 0;
	}
	if (expires <= *e + CT_REFRESH_SLACK)
		return 0;
	*e = expires;
	return 1;
}

/* ct_now is the clock of ct_entry.expires: CLOCK_MONOTONIC at tick
 * resolution, which is plenty for timeouts of a minute or more and costs a
 * fraction of bpf_ktime_get_ns.
 */
static __always_inline __u64 ct_now(void)
{
	return bpf_ktime_get_coarse_ns();
}

static __always_inline __u64 ct_timeout(const struct pkt *p)
{
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_FLAG_ACK))
		return CT_TIMEOUT_TCP;
	return CT_TIMEOUT_OTHER;
}

/* ct_fill_key fills k for p at ifindex and returns p's orientation: 0 when
 * p's source is k's first end, 1 when it is the second. The ends are
 * ordered by address, then by port; any total order works, as long as a
 * tuple and its reverse agree on it.
 */
static __always_inline __u32 ct_fill_key(struct ct_key *k, __u32 ifindex, const struct pkt *p)
{
	const __u64 *s = (const __u64 *)p->saddr.addr;
	const __u64 *d = (const __u64 *)p->daddr.addr;
	__u32 swap;

	if (s[0] != d[0])
		swap = s[0] > d[0];
	else if (s[1] != d[1])
		swap = s[1] > d[1];
	else
		swap = p->sport > p->dport;

	k->ifindex = ifindex;
	k->proto = p->proto;
	k->pad = 0;
	k->pad2 = 0;
	if (swap) {
		k->port[0] = p->dport;
		k->port[1] = p->sport;
		k->addr[0] = p->daddr;
		k->addr[1] = p->saddr;
	} else {
		k->port[0] = p->sport;
		k->port[1] = p->dport;
		k->addr[0] = p->saddr;
		k->addr[1] = p->daddr;
	}
	return swap;
}

/* ct_bit is the flag of a packet of orientation o allowed in dir. */
static __always_inline __u32 ct_bit(__u8 dir, __u32 o)
{
	return 1U << (((__u32)dir << 1) | o);
}

/* The flow cache. A lookup in lockstep_ct hashes a 44-byte key and walks a
 * bucket whose lines real traffic has usually evicted from the CPU caches
 * by the next packet. Each CPU keeps, in lockstep_ct_cache, copies of
 * entries its lookups found live, in CT_CACHE_SLOTS direct-mapped slots; a
 * packet of a cached connection is decided from its CPU's slot alone.
 *
 * A copy never says more than the entry did when it was read: same key,
 * same bits, and it is used only while
 *   - it is younger than CT_CACHE_TTL and the entry had not yet expired, so
 *     a connection the LRU evicted, or whose entry expired, passes on its
 *     cache for at most CT_CACHE_TTL more (it was allowed; eviction is not
 *     a policy decision), and the entry is refreshed at least that often
 *     while the connection is busy;
 *   - lockstep_ct_epoch still holds the value read before the entry was.
 *     Userspace bumps the epoch after deleting entries (the flush of
 *     removed endpoints), which drops every copy made before the bump; a
 *     copy made after it was read from the table after the deletion.
 * Only programs of its own CPU write a slot, and tc programs do not nest
 * on a CPU, so a slot is never read half written.
 */
#define CT_CACHE_TTL (1ULL * NSEC_PER_SEC)

static __always_inline int ct_key_eq(const struct ct_key *a, const struct ct_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 d = 0;
	int i;

	for (i = 0; i < sizeof(*a) / 4; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

/* ct_cache_slot_of returns this CPU's slot for k. */
static __always_inline struct ct_cache_slot *ct_cache_slot_of(const struct ct_key *k)
{
	const __u32 *a = (const __u32 *)k->addr;
	__u32 h = k->ifindex ^ k->port[0] ^ ((__u32)k->port[1] << 3) ^ a[3] ^ a[7];

	h = (h ^ (h >> 6) ^ (h >> 12)) & (CT_CACHE_SLOTS - 1);
	return bpf_map_lookup_elem(&lockstep_ct_cache, &h);
}

/* struct ct_hit is what ct_lookup found: the entry's flags and, for a
 * connection lockstep translates (flags & CT_SVC), the address and port
 * its translation writes.
 */
struct ct_hit {
	__u32 flags;
	__u16 nat_port;
	__u16 peer_port; /* see struct svc_ct_entry */
	struct v6addr nat_addr; /* at 8: addr_eq reads it by 8 bytes */
	__u8 refreshed;         /* the lookup moved the entry's deadline */
};

/* ct_cache_fill copies an entry a lookup found live into this CPU's slot c. */
static __always_inline void ct_cache_fill(struct ct_cache_slot *c, const struct ct_key *k, __u32 epoch,
					  __u64 now, __u64 expires, const struct ct_hit *h)
{
	c->key = *k;
	c->epoch = epoch;
	c->flags = h->flags;
	c->nat_port = h->nat_port;
	c->peer_port = h->peer_port;
	c->nat_addr = h->nat_addr;
	c->valid_until = now + CT_CACHE_TTL;
	if (c->valid_until > expires)
		c->valid_until = expires;
}

/* ct_cache_put caches an entry of flags h->flags a packet with TCP flags
 * tcpf hit, unless it is closing; a FIN or RST empties the slot.
 */
static __always_inline void ct_cache_put(struct ct_cache_slot *c, const struct ct_key *k, __u32 epoch,
					 __u64 now, __u64 expires, const struct ct_hit *h, __u8 tcpf)
{
	if ((h->flags & CT_CLOSING) || (tcpf & (TCP_FLAG_FIN | TCP_FLAG_RST)))
		c->valid_until = 0;
	else
		ct_cache_fill(c, k, epoch, now, expires, h);
}

/* ct_find reports whether a packet of key k sent by end o, in dir at the
 * endpoint of k, with TCP flags tcpf, belongs to a live connection allowed
 * earlier: in dir with the same sender, or in the other direction with the
 * other sender (the packet is a reply), and fills h. It asks this CPU's
 * flow cache first, then lockstep_ct, then lockstep_svc_ct (the
 * connections lockstep translates for Services); a hit in a table moves
 * the entry's deadline out to expires (0: never), at most about once a
 * second, marks a closing connection (ct_refresh) and caches the entry. A
 * pure SYN over a closing entry is no hit (ct_reopens), and a closing
 * lockstep_ct entry yields to a live lockstep_svc_ct one.
 */
static __always_inline int ct_find(const struct ct_key *k, __u32 o, __u8 dir, __u64 expires, __u8 tcpf,
				   __u64 now, struct ct_hit *h)
{
	__u32 want = ct_bit(dir, o) | ct_bit(dir ^ 1, o ^ 1);
	struct ct_cache_slot *c;
	struct svc_ct_entry *s;
	struct ct_entry *v;
	__u32 zero = 0, epoch;
	__u32 *e;

	e = bpf_map_lookup_elem(&lockstep_ct_epoch, &zero);
	c = ct_cache_slot_of(k);
	if (!e || !c)
		return 0; /* cannot happen: both are arrays */
	epoch = *(volatile __u32 *)e;
	if (!(tcpf & TCP_FLAGS_CT) && c->epoch == epoch && now < c->valid_until && (c->flags & want) &&
	    ct_key_eq(&c->key, k)) {
		h->flags = c->flags;
		if (c->flags & CT_SVC) {
			h->nat_port = c->nat_port;
			h->peer_port = c->peer_port;
			h->nat_addr = c->nat_addr;
		}
		return 1;
	}

	v = bpf_map_lookup_elem(&lockstep_ct, k);
	if (v && v->expires >= now && (v->flags & want) && !ct_reopens(v->flags, tcpf)) {
		/* A closing connection's tuple may already carry a new
		 * translated one, which then decides. */
		if (v->flags & CT_CLOSING) {
			s = bpf_map_lookup_elem(&lockstep_svc_ct, k);
			if (s && s->expires >= now && (s->flags & want) && !(s->flags & CT_CLOSING))
				goto svc;
		}
		/* Written through v: should the LRU have recycled the element
		 * for another key meanwhile, that connection lives longer; no
		 * bit moves. */
		ct_refresh(&v->expires, &v->flags, tcpf, expires, now);
		h->flags = v->flags;
		ct_cache_put(c, k, epoch, now, v->expires, h, tcpf);
		return 1;
	}

	/* Only TCP, UDP and SCTP connections are ever translated. */
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP && k->proto != IPPROTO_SCTP)
		return 0;
	s = bpf_map_lookup_elem(&lockstep_svc_ct, k);
	if (!s || s->expires < now || !(s->flags & want) || ct_reopens(s->flags, tcpf))
		return 0;
svc:
	h->refreshed = ct_refresh(&s->expires, &s->flags, tcpf, expires, now);
	h->flags = s->flags;
	h->nat_port = s->nat_port;
	h->peer_port = s->peer_port;
	h->nat_addr = s->nat_addr;
	ct_cache_put(c, k, epoch, now, s->expires, h, tcpf);
	return 1;
}

/* ct_lookup is ct_find for a packet whose TCP flags do not count (an ICMP
 * error's quote).
 */
static __always_inline int ct_lookup(const struct ct_key *k, __u32 o, __u8 dir,
				     __u64 expires, __u64 now, struct ct_hit *h)
{
	return ct_find(k, o, dir, expires, 0, now, h);
}

/* ct_track is ct_find for packet p of key k, sent by end o in dir: a hit
 * keeps the connection for ct_timeout(p) more.
 */
static __always_inline int ct_track(const struct ct_key *k, __u32 o, __u8 dir, const struct pkt *p,
				    __u64 now, struct ct_hit *h)
{
	return ct_find(k, o, dir, now + ct_timeout(p), p->tcp_flags, now, h);
}

/* ct_mark_twin marks closing, on a FIN or RST p of a translated connection
 * (ct_refresh), the connection's other lockstep_svc_ct entry: that of key
 * k, the tuple p has after translation. The marks of the entry p hit are
 * ct_find's.
 */
static __always_inline void ct_mark_twin(const struct ct_key *k, const struct pkt *p, __u64 now)
{
	struct svc_ct_entry *s;

	if (!(p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)))
		return;
	s = bpf_map_lookup_elem(&lockstep_svc_ct, k);
	if (s && s->expires >= now)
		ct_refresh(&s->expires, &s->flags, p->tcp_flags, now + ct_timeout(p), now);
}

/* ct_share_key is the key of the share of ifindex's connections opened
 * in dir.
 */
static __always_inline __u32 ct_share_key(__u32 ifindex, __u8 dir)
{
	return ifindex << 1 | dir;
}

/* ct_share_slot returns the lockstep_ct_share slot of key, made empty if
 * there was none, or NULL when the map has no room.
 */
static __always_inline struct ct_share *ct_share_slot(__u32 key)
{
	struct ct_share *s = bpf_map_lookup_elem(&lockstep_ct_share, &key);

	if (!s) {
		struct ct_share z = {};

		bpf_map_update_elem(&lockstep_ct_share, &key, &z, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&lockstep_ct_share, &key);
	}
	return s;
}

/* ct_held is the estimate of the entries held at key whose slot is s:
 * created less released, never below zero.
 */
static __always_inline __u64 ct_held(const struct ct_share *s, __u32 key)
{
	__u64 *rel = bpf_map_lookup_elem(&lockstep_ct_released, &key);
	__u64 created = s->created;

	if (!rel)
		return created;
	if (*rel > created)
		return 0;
	return created - *rel;
}

/* ct_admit reports whether the endpoint of ifindex may create n more
 * conntrack entries for a connection opened in dir, and counts them or the
 * refusal (lockstep_ct_share). It refuses only while the node is under
 * pressure, its estimate of the entries held in both tables, at
 * CT_NODE_KEY, past CT_PRESSURE with these n (see lib/maps.h), and the
 * endpoint's estimate in dir past its share. Both estimates, created less
 * released, are never below the truth but by a race: CPUs that all read
 * one below the bound all create, so the node may pass CT_PRESSURE, and
 * an endpoint its share, by one new connection per CPU at most. The
 * node's count takes every entry admitted, so that it stays above the
 * truth: those of endpoints without a slot, and those admitted always.
 * always admits (and counts) beyond the share: the node's own connections
 * to its pod (kubelet's probes) are never refused. Nothing is refused
 * either while the agent's reclaimer does not run (its last run, at
 * CT_RECLAIM_KEY, older than CT_RECLAIM_STALE): nothing would be released.
 * Without a slot for the endpoint (more than CT_SHARE_SLOTS) its entries
 * are made and counted for the node only; without one for the node (the
 * same), the node counts as under pressure.
 */
static __always_inline int ct_admit(__u32 ifindex, __u8 dir, __u32 n, int always, __u64 now)
{
	__u32 key = ct_share_key(ifindex, dir), node_key = CT_NODE_KEY, beat_key = CT_RECLAIM_KEY;
	struct ct_share *s = ct_share_slot(key), *node = ct_share_slot(node_key);
	__u64 *beat;

	beat = bpf_map_lookup_elem(&lockstep_ct_released, &beat_key);
	if (!beat || *beat + CT_RECLAIM_STALE < now)
		always = 1;
	if (!always && s && (!node || ct_held(node, node_key) + n > CT_PRESSURE) &&
	    ct_held(s, key) + n > CT_SHARE) {
		__sync_fetch_and_add(&s->refused, 1);
		return 0;
	}
	if (node)
		__sync_fetch_and_add(&node->created, n);
	if (s)
		__sync_fetch_and_add(&s->created, n);
	return 1;
}

/* ct_related reports whether the ICMP error p, in dir at ifindex, is
 * about a connection allowed earlier: the packet it quotes belongs to that
 * connection, and the error travels as that packet's reply would, to the
 * quoted packet's source (Linux conntrack's rule; a router on the way may
 * send it, so its source says nothing). An error to anyone else is judged
 * as a new ICMP packet: quoting a tracked connection must not carry a pod's
 * packet to a destination policy denies. An error the pod sends must come
 * from the address the quoted packet was sent to: it skips anti-spoofing
 * as a tracked packet does, and pods do not route. It never keeps a
 * connection alive. It fills in the quoted packet, *o its orientation in
 * the connection's key, and h the entry.
 */
static __always_inline int ct_related(struct __sk_buff *skb, const struct pkt *p, __u32 ifindex,
				      __u8 dir, __u64 now, struct pkt *in, __u32 *o, struct ct_hit *h)
{
	struct ct_key k;

	__builtin_memset(in, 0, sizeof(*in));
	if (parse_icmp_quote(skb, p->l4_off, p->is_v6, in))
		return 0;
	if (!addr_eq(&p->daddr, &in->saddr))
		return 0;
	if (dir == DIR_EGRESS && !addr_eq(&p->saddr, &in->daddr))
		return 0;
	*o = ct_fill_key(&k, ifindex, in);
	/* The error is sent by the end the quoted packet went to. */
	return ct_lookup(&k, *o ^ 1, dir, 0, now, h);
}

#define CT_EEXIST 17 /* EEXIST */
#define CT_ENOENT 2  /* ENOENT */

/* ct_put writes v at k in the conntrack table map (CT_TABLE_* table), as
 * BPF_ANY would, and counts in lockstep_ct_inserted the write that adds a
 * key: the agent derives the table's evictions from that count (see
 * lockstep_ct_evictions). The write that adds is the one BPF_NOEXIST
 * allows; a key already present is replaced with BPF_EXIST, and one gone
 * between the two (the LRU may drop it to make room for the very write)
 * is added again with BPF_NOEXIST. Should another CPU add the key between
 * those two, its entry stands and this one is not written: a bit this one
 * had and that one lacks only sends its direction through policy again.
 */
static __always_inline void ct_put(void *map, __u32 table, const struct ct_key *k, const void *v)
{
	long err = bpf_map_update_elem(map, k, v, BPF_NOEXIST);
	__u64 *c;

	if (err == -CT_EEXIST) {
		err = bpf_map_update_elem(map, k, v, BPF_EXIST);
		if (err != -CT_ENOENT)
			return;
		err = bpf_map_update_elem(map, k, v, BPF_NOEXIST);
	}
	if (err)
		return;
	c = bpf_map_lookup_elem(&lockstep_ct_inserted, &table);
	if (c)
		*c += 1; /* per CPU, and tc programs do not nest on a CPU */
}

/* ct_create records that p, of orientation o in dir, was allowed as a new
 * connection, in an entry of its own bit and flags (CT_ROUTED) only. It never merges with an
 * entry ct_lookup saw: an LRU map may recycle that element for another key
 * at any time, and no bit of another connection may ever be copied into
 * this one. Nothing is lost in practice: at one endpoint, every packet of a
 * key that passes anti-spoofing either has the orientation of the entry's
 * bit in its direction or is its reply, so a live entry always matched. A
 * replaced bit only sends its direction through policy again.
 */
static __always_inline void ct_create(const struct ct_key *k, __u32 o, __u8 dir,
				      const struct pkt *p, __u64 now, __u32 flags)
{
	struct ct_entry n = {
		.expires = now + ct_timeout(p),
		.flags = ct_bit(dir, o) | flags,
	};

	ct_put(&lockstep_ct, CT_TABLE_CT, k, &n);
}

/* ct_create_svc records, in lockstep_svc_ct, a translated connection's
 * entry of key k: bit is the ct_bit its packet was allowed with, flags its
 * CT_SVC_* flags, nat the address and port the translation writes, and
 * peer_port the client's port on the other side (0: unchanged). n is where
 * the entry is built. Like ct_create, it never merges with an existing
 * entry.
 */
static __always_inline void ct_create_svc(const struct ct_key *k, __u32 bit, __u32 flags,
					  const struct v6addr *nat_addr, __u16 nat_port, __u16 peer_port,
					  const struct pkt *p, __u64 now, struct svc_ct_entry *n)
{
	n->expires = now + ct_timeout(p);
	n->flags = bit | flags;
	n->nat_port = nat_port;
	n->peer_port = peer_port;
	n->nat_addr = *nat_addr;
	ct_put(&lockstep_svc_ct, CT_TABLE_SVC, k, n);
}

#endif /* LOCKSTEP_CT_H */
