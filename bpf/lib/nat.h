/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Address and port rewriting for Service translation, with the checksums
 * kept right by the kernel's helpers: bpf_l3_csum_replace for the IPv4
 * header, bpf_l4_csum_replace for TCP and UDP (the addresses through the
 * pseudo header, so a checksum the pod left to offload, CHECKSUM_PARTIAL,
 * stays right too). A UDP checksum of zero (IPv4: none) stays zero.
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

#include "maps.h"
#include "parse.h"

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

/* nat_addr writes the address at off (from → to) and updates the checksums. */
static __always_inline int nat_addr(struct __sk_buff *skb, const struct pkt *p, const struct nat_l4 *l4,
				    __u32 off, const struct v6addr *from, const struct v6addr *to)
{
	if (!p->is_v6) {
		__be32 f = *(const __be32 *)&from->addr[12];
		__be32 t = *(const __be32 *)&to->addr[12];

		if (bpf_l3_csum_replace(skb, IP4_CSUM_OFF, f, t, 4))
			return -1;
		if (l4->csum_off &&
		    bpf_l4_csum_replace(skb, l4->csum_off, f, t, BPF_F_PSEUDO_HDR | l4->flags | 4))
			return -1;
		return bpf_skb_store_bytes(skb, off, &t, 4, BPF_F_INVALIDATE_HASH);
	}
	if (l4->csum_off) {
		__s64 d = bpf_csum_diff((__be32 *)from->addr, 16, (__be32 *)to->addr, 16, 0);

		if (bpf_l4_csum_replace(skb, l4->csum_off, 0, d, BPF_F_PSEUDO_HDR | l4->flags))
			return -1;
	}
	return bpf_skb_store_bytes(skb, off, to->addr, 16, BPF_F_INVALIDATE_HASH);
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
	return bpf_skb_store_bytes(skb, off, &t, 2, 0);
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
