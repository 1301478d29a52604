/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Address and port rewriting for Service translation. The TCP and UDP
 * checksums are kept right by the kernel's helper, bpf_l4_csum_replace
 * (the addresses through the pseudo header): only the kernel knows whether
 * a checksum is complete or left to offload (CHECKSUM_PARTIAL: the pod's
 * own packets, usually), and the two are updated differently. A UDP
 * checksum of zero (IPv4: none) stays zero. The IPv4 header checksum, which
 * is always complete, is updated in place (RFC 1624), and the fields are
 * written straight into the packet: every helper call costs a few
 * nanoseconds of every translated packet.
 *
 * A tracked translated packet (nat_one) skips the helper where the kernel
 * tells the program how the skb's checksum stands (skb_csum_kind: Linux
 * 6.3's bpf_cast_to_kern_ctx, a weak kfunc, so older kernels load the
 * object and keep the helper).
 *
 * SCTP's CRC32c covers the ports but not the addresses (it has no pseudo
 * header), and no helper updates it: lockstep rewrites the addresses of
 * SCTP packets only, never their ports (see lib/service.h).
 */
#ifndef LOCKSTEP_NAT_H
#define LOCKSTEP_NAT_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "maps.h"
#include "parse.h"
#include "ct.h"

#define IP4_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP4_SADDR_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP4_DADDR_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))
#define IP6_SADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))

/* struct nat_l4 says where p's L4 checksum is (0: none to update) and how
 * to update it.
 */
struct nat_l4 {
	__u32 csum_off;
	__u64 flags; /* BPF_F_MARK_MANGLED_0 for UDP */
};

static __always_inline void nat_l4_of(const struct pkt *p, struct nat_l4 *l4)
{
	l4->csum_off = 0;
	l4->flags = 0;
	if (p->proto == IPPROTO_TCP) {
		l4->csum_off = p->l4_off + 16;
	} else if (p->proto == IPPROTO_UDP) {
		l4->csum_off = p->l4_off + 6;
		l4->flags = BPF_F_MARK_MANGLED_0;
	}
}

/* One's complement arithmetic on 32-bit partial sums, as the kernel's
 * csum_add and csum_fold. Fields are summed as they lie in memory: the
 * sum is the same in either byte order.
 */
static __always_inline __u32 csum_add32(__u32 a, __u32 b)
{
	a += b;
	return a + (a < b);
}

static __always_inline __u16 csum_fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* addr_diff is the checksum difference of replacing from by to (16 bytes). */
static __always_inline __u32 addr_diff(const struct v6addr *from, const struct v6addr *to)
{
	const __u32 *f = (const __u32 *)from->addr, *t = (const __u32 *)to->addr;
	__u32 d = 0;
	int i;

	for (i = 0; i < 4; i++)
		d = csum_add32(csum_add32(d, ~f[i]), t[i]);
	return d;
}

/* store writes len bytes (a constant) at offset off of the frame: straight
 * into the linear data when it holds them, else with the helper.
 */
static __always_inline int store(struct __sk_buff *skb, __u32 off, const void *src, __u32 len)
{
	void *data = skb_data(skb);
	void *data_end = skb_data_end(skb);

	if (off < 0x4000 && data + off + len <= data_end) {
		__builtin_memcpy(data + off, src, len);
		return 0;
	}
	return bpf_skb_store_bytes(skb, off, src, len, 0);
}

/* ip4_csum_update adds diff to the IPv4 header checksum. The header's
 * checksum is never left to offload: it is always complete.
 */
static __always_inline int ip4_csum_update(struct __sk_buff *skb, __u32 diff)
{
	__u16 c;

	if (load(skb, IP4_CSUM_OFF, &c, sizeof(c)))
		return -1;
	c = csum_fold32(csum_add32(diff, (__u16)~c));
	return store(skb, IP4_CSUM_OFF, &c, sizeof(c));
}

/* l4_csum_pseudo6 adds diff, a change of an IPv6 pseudo-header address,
 * to the L4 checksum at off.
 */
static __always_inline int l4_csum_pseudo6(struct __sk_buff *skb, __u32 off, __u32 diff, __u64 flags)
{
	/* BPF_F_IPV6 keeps a CHECKSUM_COMPLETE skb->csum right for IPv6
	 * (Linux 6.16); older kernels refuse the flag. */
	long err = bpf_l4_csum_replace(skb, off, 0, diff, BPF_F_PSEUDO_HDR | BPF_F_IPV6 | flags);

	if (err == -22 /* EINVAL */)
		err = bpf_l4_csum_replace(skb, off, 0, diff, BPF_F_PSEUDO_HDR | flags);
	return err ? -1 : 0;
}

/* nat_addr writes the address at off (from → to) and updates the checksums. */
static __always_inline int nat_addr(struct __sk_buff *skb, const struct pkt *p, const struct nat_l4 *l4,
				    __u32 off, const struct v6addr *from, const struct v6addr *to)
{
	if (!p->is_v6) {
		__be32 f = *(const __be32 *)&from->addr[12];
		__be32 t = *(const __be32 *)&to->addr[12];

		if (ip4_csum_update(skb, csum_add32(~f, t)))
			return -1;
		/* The pseudo header: the kernel knows whether the L4 checksum
		 * is complete or left to offload (CHECKSUM_PARTIAL), which
		 * updates differently. */
		if (l4->csum_off &&
		    bpf_l4_csum_replace(skb, l4->csum_off, f, t, BPF_F_PSEUDO_HDR | l4->flags | 4))
			return -1;
		return store(skb, off, &t, 4);
	}
	if (l4->csum_off && l4_csum_pseudo6(skb, l4->csum_off, addr_diff(from, to), l4->flags))
		return -1;
	return store(skb, off, to->addr, 16);
}

/* nat_port writes the port at off (from → to, host byte order) and updates
 * the L4 checksum. SCTP ports are never rewritten.
 */
static __always_inline int nat_port(struct __sk_buff *skb, const struct nat_l4 *l4, __u32 off,
				    __u16 from, __u16 to)
{
	__be16 f = bpf_htons(from), t = bpf_htons(to);

	if (l4->csum_off && bpf_l4_csum_replace(skb, l4->csum_off, f, t, l4->flags | 2))
		return -1;
	return store(skb, off, &t, 2);
}

/* bpf_cast_to_kern_ctx gives the skb behind the context (Linux 6.3), to
 * read its ip_summed. Weak: on an older kernel its address is 0 and the
 * verifier drops the call as dead code.
 */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym __weak;

/* struct sk_buff___lockstep is the one field of the kernel's sk_buff
 * lockstep reads, located through the kernel's BTF (CO-RE).
 */
struct sk_buff___lockstep {
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

/* The kernel's skb->ip_summed values (include/linux/skbuff.h). */
#define SKB_CHECKSUM_COMPLETE 2
#define SKB_CHECKSUM_PARTIAL 3

/* How nat_one updates an L4 checksum. */
enum {
	NAT_CSUM_HELPER = 0, /* bpf_l4_csum_replace: the kernel decides */
	NAT_CSUM_OFFLOAD,    /* left to offload (CHECKSUM_PARTIAL): the field
			      * holds the pseudo header's sum, which an
			      * address change is added to; the ports are the
			      * kernel's to sum on the way out */
	NAT_CSUM_DONE,       /* complete in the field (CHECKSUM_NONE,
			      * CHECKSUM_UNNECESSARY): every change is taken
			      * from the inverted sum, RFC 1624 */
};

/* skb_csum_kind is how nat_one can update skb's L4 checksum without the
 * helper. CHECKSUM_COMPLETE also keeps a sum of the whole packet in
 * skb->csum, which only the helper can update: it, and a kernel without
 * bpf_cast_to_kern_ctx, get NAT_CSUM_HELPER.
 */
static __always_inline int skb_csum_kind(struct __sk_buff *skb)
{
	struct sk_buff___lockstep *k;
	__u32 s;

	if (!bpf_cast_to_kern_ctx)
		return NAT_CSUM_HELPER;
	k = bpf_cast_to_kern_ctx(skb);
	s = BPF_CORE_READ_BITFIELD(k, ip_summed);
	if (s == SKB_CHECKSUM_PARTIAL)
		return NAT_CSUM_OFFLOAD;
	if (s == SKB_CHECKSUM_COMPLETE)
		return NAT_CSUM_HELPER;
	return NAT_CSUM_DONE;
}

/* nat_one_csum is nat_one's L4 checksum update through the helper: the
 * address through the pseudo header, then the port.
 */
static __always_inline int nat_one_csum(struct __sk_buff *skb, const struct pkt *p, const struct nat_l4 *l4,
					const struct v6addr *from, const struct v6addr *to, __be32 f4, __be32 t4,
					__be16 fp, __be16 tp, __u32 port)
{
	if (!l4->csum_off)
		return 0;
	if (!p->is_v6) {
		if (bpf_l4_csum_replace(skb, l4->csum_off, f4, t4, BPF_F_PSEUDO_HDR | l4->flags | 4))
			return -1;
	} else if (l4_csum_pseudo6(skb, l4->csum_off, addr_diff(from, to), l4->flags)) {
		return -1;
	}
	if (port && bpf_l4_csum_replace(skb, l4->csum_off, fp, tp, l4->flags | 2))
		return -1;
	return 0;
}

/* nat_one_slow writes what nat_one writes when the headers are not all
 * in the linear data (the checksums are done already).
 */
static __always_inline int nat_one_slow(struct __sk_buff *skb, const struct pkt *p, __u32 aoff, __u32 poff,
					__be32 f4, __be32 t4, const struct v6addr *to, __be16 tp, __u32 port)
{
	if (!p->is_v6) {
		if (ip4_csum_update(skb, csum_add32(~f4, t4)) || store(skb, aoff, &t4, 4))
			return -1;
	} else if (store(skb, aoff, to->addr, 16)) {
		return -1;
	}
	if (port)
		return store(skb, poff, &tp, sizeof(tp));
	return 0;
}

/* nat_one rewrites one end of p, the packet in skb: its address (from →
 * to) at aoff and its port (host byte order, from → to) at poff, the
 * checksums kept right. What a tracked translated packet needs, inlined:
 * a call to nat_rewrite and its comparisons cost more than the rewrite.
 * The ports of SCTP are never rewritten.
 *
 * Where skb_csum_kind knows the L4 checksum's state, every field,
 * the L4 checksum too, is written straight into the linear data, with no
 * helper call (the first costs some 20 ns, more than the rest of the
 * rewrite); else, or when the headers are not all linear, the helper
 * updates the L4 checksum.
 */
static __always_inline int nat_one(struct __sk_buff *skb, const struct pkt *p, __u32 aoff, __u32 poff,
				   const struct v6addr *from, const struct v6addr *to, __u16 pfrom, __u16 pto)
{
	__u32 port = pfrom != pto && p->proto != IPPROTO_SCTP;
	__be32 f4 = *(const __be32 *)&from->addr[12];
	__be32 t4 = *(const __be32 *)&to->addr[12];
	__be16 fp = bpf_htons(pfrom), tp = bpf_htons(pto);
	int kind = NAT_CSUM_HELPER;
	struct nat_l4 l4;
	void *data, *end;
	__u32 d = 0;

	nat_l4_of(p, &l4);
	if (l4.csum_off)
		kind = skb_csum_kind(skb);
	if (kind == NAT_CSUM_HELPER) {
		/* The L4 checksum first: the helpers move the packet, and
		 * then one bounds check covers every field written after. */
		if (nat_one_csum(skb, p, &l4, from, to, f4, t4, fp, tp, port))
			return -1;
	} else {
		d = p->is_v6 ? addr_diff(from, to) : csum_add32(~f4, t4);
		if (port && kind == NAT_CSUM_DONE)
			d = csum_add32(d, csum_add32((__u16)~fp, tp));
	}
	data = skb_data(skb);
	end = skb_data_end(skb);
	if (poff >= 0x4000 || l4.csum_off >= 0x4000 || data + poff + sizeof(tp) > end || data + aoff + 16 > end)
		goto slow;
	if (kind != NAT_CSUM_HELPER) {
		__u16 *c = data + l4.csum_off;
		__u16 v;

		if ((void *)(c + 1) > end)
			goto slow;
		/* A UDP checksum of zero is none (IPv4), and one that
		 * comes out zero is sent as 0xffff, as the helper does. */
		if (!(l4.flags && *c == 0)) {
			if (kind == NAT_CSUM_OFFLOAD)
				v = (__u16)~csum_fold32(csum_add32(d, *c));
			else
				v = csum_fold32(csum_add32(d, (__u16)~*c));
			if (l4.flags && v == 0)
				v = 0xffff;
			*c = v;
		}
	}
	if (!p->is_v6) {
		__u16 *c = data + IP4_CSUM_OFF;

		*c = csum_fold32(csum_add32(csum_add32(~f4, t4), (__u16)~*c));
		*(__be32 *)(data + aoff) = t4;
	} else {
		__builtin_memcpy(data + aoff, to->addr, 16);
	}
	if (port)
		*(__be16 *)(data + poff) = tp;
	return 0;
slow:
	/* Nothing is written yet but, with the helper, the L4 checksum. */
	if (kind != NAT_CSUM_HELPER && nat_one_csum(skb, p, &l4, from, to, f4, t4, fp, tp, port))
		return -1;
	return nat_one_slow(skb, p, aoff, poff, f4, t4, to, tp, port);
}

/* nat_rewrite turns the addresses and ports of p, the packet in skb, into
 * those of t, field by field where they differ. It returns 0, or -1 when a
 * helper failed (the packet may then be half rewritten: drop it).
 *
 * A global function: the verifier checks it once, not once per path that
 * reaches it, which keeps the programs within its complexity limit.
 */
__attribute__((noinline)) int nat_rewrite(struct __sk_buff *skb, const struct pkt *p, const struct pkt *t)
{
	__u32 soff, doff;
	struct nat_l4 l4;

	if (!skb || !p || !t)
		return -1;
	soff = p->is_v6 ? IP6_SADDR_OFF : IP4_SADDR_OFF;
	doff = p->is_v6 ? IP6_DADDR_OFF : IP4_DADDR_OFF;
	nat_l4_of(p, &l4);
	if (!addr_eq(&p->saddr, &t->saddr) && nat_addr(skb, p, &l4, soff, &p->saddr, &t->saddr))
		return -1;
	if (!addr_eq(&p->daddr, &t->daddr) && nat_addr(skb, p, &l4, doff, &p->daddr, &t->daddr))
		return -1;
	if (p->proto == IPPROTO_SCTP)
		return 0;
	if (p->sport != t->sport && nat_port(skb, &l4, p->l4_off, p->sport, t->sport))
		return -1;
	if (p->dport != t->dport && nat_port(skb, &l4, p->l4_off + 2, p->dport, t->dport))
		return -1;
	return 0;
}

/* nat_icmp_quote translates the packet in that the ICMP error p quotes,
 * of a connection whose translation h holds: fwd 0, its destination
 * becomes h's address and port; fwd 1, its source. The client's port, at
 * the other end, becomes h's peer_port when it has one. The quoted IPv4
 * header's checksum and the ICMP (ICMPv6) checksum are kept right; the
 * quoted L4 checksum is left as it is (no kernel checks it). A global
 * function, checked once by the verifier (see nat_rewrite).
 */
__attribute__((noinline)) int nat_icmp_quote(struct __sk_buff *skb, const struct pkt *p, const struct pkt *in,
					     const struct ct_hit *h, __u32 fwd)
{
	__u32 inner, l4, diff = 0;
	const struct v6addr *old;

	if (!skb || !p || !in || !h)
		return -1;
	inner = p->l4_off + 8;
	old = fwd ? &in->saddr : &in->daddr;
	if (p->is_v6) {
		l4 = inner + sizeof(struct ipv6hdr);
		if (!addr_eq(old, &h->nat_addr)) {
			diff = addr_diff(old, &h->nat_addr);
			if (store(skb, inner + (fwd ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr)),
				  h->nat_addr.addr, 16))
				return -1;
		}
	} else {
		__u8 vihl;

		if (load(skb, inner, &vihl, sizeof(vihl)))
			return -1;
		l4 = inner + (vihl & 0xf) * 4;
		if (!addr_eq(old, &h->nat_addr)) {
			__be32 f = *(const __be32 *)&old->addr[12];
			__be32 t = *(const __be32 *)&h->nat_addr.addr[12];
			__u16 c;

			/* The quoted header sums to the same with its checksum
			 * updated: the ICMP checksum does not change. */
			if (load(skb, inner + offsetof(struct iphdr, check), &c, sizeof(c)))
				return -1;
			c = csum_fold32(csum_add32(csum_add32(~f, t), (__u16)~c));
			if (store(skb, inner + offsetof(struct iphdr, check), &c, sizeof(c)) ||
			    store(skb, inner + (fwd ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr)), &t, 4))
				return -1;
		}
	}
	if (in->proto == IPPROTO_TCP || in->proto == IPPROTO_UDP) {
		__be16 f = bpf_htons(fwd ? in->sport : in->dport), t = bpf_htons(h->nat_port);

		if (f != t) {
			if (store(skb, l4 + (fwd ? 0 : 2), &t, sizeof(t)))
				return -1;
			diff = csum_add32(diff, csum_add32((__u16)~f, t));
		}
		f = bpf_htons(fwd ? in->dport : in->sport);
		t = bpf_htons(h->peer_port);
		if (h->peer_port && f != t) {
			if (store(skb, l4 + (fwd ? 2 : 0), &t, sizeof(t)))
				return -1;
			diff = csum_add32(diff, csum_add32((__u16)~f, t));
		}
	}
	if (diff && bpf_l4_csum_replace(skb, p->l4_off + 2, 0, diff, 0))
		return -1;
	return 0;
}

/* nat_icmp_outer makes h's address the ICMP error p's destination (fwd 1)
 * or source (fwd 0), with the IPv4 header checksum or the ICMPv6
 * checksum (which covers the pseudo header) kept right. A global function
 * (see nat_rewrite).
 */
__attribute__((noinline)) int nat_icmp_outer(struct __sk_buff *skb, const struct pkt *p,
					     const struct ct_hit *h, __u32 fwd)
{
	const struct v6addr *outer;

	if (!skb || !p || !h)
		return -1;
	outer = fwd ? &p->daddr : &p->saddr;
	if (p->is_v6) {
		if (l4_csum_pseudo6(skb, p->l4_off + 2, addr_diff(outer, &h->nat_addr), 0))
			return -1;
		return store(skb, fwd ? IP6_DADDR_OFF : IP6_SADDR_OFF, h->nat_addr.addr, 16);
	}
	{
		__be32 f = *(const __be32 *)&outer->addr[12];
		__be32 t = *(const __be32 *)&h->nat_addr.addr[12];

		if (ip4_csum_update(skb, csum_add32(~f, t)))
			return -1;
		return store(skb, fwd ? IP4_DADDR_OFF : IP4_SADDR_OFF, &t, 4);
	}
}

/* swap_macs exchanges the frame's Ethernet addresses, so that a frame the
 * pod sent can be handed back to it.
 */
static __always_inline int swap_macs(struct __sk_buff *skb)
{
	__u8 m[12], s[12];
	int i;

	if (bpf_skb_load_bytes(skb, 0, m, sizeof(m)))
		return -1;
	for (i = 0; i < 6; i++) {
		s[i] = m[i + 6];
		s[i + 6] = m[i];
	}
	return bpf_skb_store_bytes(skb, 0, s, sizeof(s), 0);
}

#endif /* LOCKSTEP_NAT_H */
