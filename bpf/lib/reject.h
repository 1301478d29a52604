/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Refusals, as kube-proxy refuses a connection to a Service without a
 * ready endpoint (its REJECT rules): the packet the pod sent is turned, in
 * place, into the answer, which goes straight back to the pod:
 *   - TCP: a reset from the frontend (nf_reject's rules: RST with the
 *     acknowledged sequence number when the packet carried ACK, else
 *     RST|ACK acknowledging what it carried), never one for a reset;
 *   - UDP, SCTP: an ICMP (ICMPv6) port unreachable from the frontend,
 *     quoting the packet's IP header (with IPv6 extension headers) and
 *     the first 8 bytes of its L4 header, at most QUOTE_MAX bytes.
 * Checksums are computed with bpf_csum_diff. The caller redirects the
 * result to the pod (bpf_redirect_peer from the host veth's tc ingress).
 */
#ifndef LOCKSTEP_REJECT_H
#define LOCKSTEP_REJECT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"
#include "parse.h"

#define QUOTE_MAX 128

/* pseudo6 is the IPv6 pseudo header of an upper-layer checksum. */
struct pseudo6 {
	struct v6addr saddr;
	struct v6addr daddr;
	__be32 len;
	__be32 nexthdr;
};

/* pseudo4 is the IPv4 pseudo header. */
struct pseudo4 {
	__be32 saddr;
	__be32 daddr;
	__u8 zero;
	__u8 proto;
	__be16 len;
};

/* A refusal is built in a per-CPU buffer, not on the stack, which the
 * programs need whole (512 bytes for all their frames together). Not
 * pinned: nothing outside a program run reads it.
 */
struct reject_scratch {
	__u8 quote[QUOTE_MAX];
	__u8 th[20];  /* struct tcphdr: the segment answered */
	__u8 rst[20]; /* struct tcphdr: the reset */
	__u8 ip[40];  /* struct iphdr or struct ipv6hdr */
	struct pseudo6 ph6;
	struct pseudo4 ph4;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reject_scratch);
} lockstep_reject_scratch SEC(".maps");
#define REJECT_TTL 64
#define IP_DF 0x4000
#define ICMP_DEST_UNREACH 3
#define ICMP_PORT_UNREACH 3
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PORT_UNREACH 4

/* csum_fold folds a bpf_csum_diff sum into a 16-bit Internet checksum. */
static __always_inline __u16 csum_fold(__s64 sum)
{
	__u64 s = (__u32)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~(__u16)s;
}

/* pseudo_sum sums the pseudo header of an answer to p (source: p's
 * destination) of upper-layer protocol proto and length len.
 */
static __always_inline __s64 pseudo_sum(struct reject_scratch *sc, const struct pkt *p, __u8 proto, __u16 len)
{
	if (p->is_v6) {
		sc->ph6.saddr = p->daddr;
		sc->ph6.daddr = p->saddr;
		sc->ph6.len = bpf_htonl(len);
		sc->ph6.nexthdr = bpf_htonl(proto);
		return bpf_csum_diff(NULL, 0, (__be32 *)&sc->ph6, sizeof(sc->ph6), 0);
	}
	sc->ph4.saddr = *(const __be32 *)&p->daddr.addr[12];
	sc->ph4.daddr = *(const __be32 *)&p->saddr.addr[12];
	sc->ph4.zero = 0;
	sc->ph4.proto = proto;
	sc->ph4.len = bpf_htons(len);
	return bpf_csum_diff(NULL, 0, (__be32 *)&sc->ph4, sizeof(sc->ph4), 0);
}

/* reject_headers resizes the frame of p to an answer of l4len bytes of
 * protocol proto and writes its IP header (addresses swapped; the caller
 * swaps the Ethernet addresses). It returns the offset of the L4 header, or
 * a negative value on failure.
 */
static __always_inline int reject_headers(struct __sk_buff *skb, struct reject_scratch *sc,
					  const struct pkt *p, __u8 proto, __u16 l4len)
{
	__u32 iplen = p->is_v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);

	if (bpf_skb_change_tail(skb, ETH_HLEN + iplen + l4len, 0))
		return -1;
	if (p->is_v6) {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)sc->ip;

		__builtin_memset(ip6, 0, sizeof(*ip6));
		ip6->version = 6;
		ip6->payload_len = bpf_htons(l4len);
		ip6->nexthdr = proto;
		ip6->hop_limit = REJECT_TTL;
		__builtin_memcpy(&ip6->saddr, p->daddr.addr, 16);
		__builtin_memcpy(&ip6->daddr, p->saddr.addr, 16);
		if (bpf_skb_store_bytes(skb, ETH_HLEN, ip6, sizeof(*ip6), BPF_F_RECOMPUTE_CSUM))
			return -1;
	} else {
		struct iphdr *ip = (struct iphdr *)sc->ip;

		__builtin_memset(ip, 0, sizeof(*ip));
		ip->version = 4;
		ip->ihl = 5;
		ip->tot_len = bpf_htons(sizeof(struct iphdr) + l4len);
		ip->frag_off = bpf_htons(IP_DF);
		ip->ttl = REJECT_TTL;
		ip->protocol = proto;
		ip->saddr = *(const __be32 *)&p->daddr.addr[12];
		ip->daddr = *(const __be32 *)&p->saddr.addr[12];
		ip->check = csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)ip, sizeof(*ip), 0));
		if (bpf_skb_store_bytes(skb, ETH_HLEN, ip, sizeof(*ip), BPF_F_RECOMPUTE_CSUM))
			return -1;
	}
	return ETH_HLEN + iplen;
}

/* ip_payload_len returns the length of p's IP payload from its L4 header
 * on, from the IP header's length field.
 */
static __always_inline int ip_payload_len(struct __sk_buff *skb, const struct pkt *p, __u32 *len)
{
	__be16 l;

	if (p->is_v6) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, payload_len), &l, sizeof(l)))
			return -1;
		*len = bpf_ntohs(l) + ETH_HLEN + sizeof(struct ipv6hdr) - p->l4_off;
		return 0;
	}
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tot_len), &l, sizeof(l)))
		return -1;
	*len = bpf_ntohs(l) + ETH_HLEN - p->l4_off;
	return 0;
}

/* reject_tcp turns the TCP segment p into the reset that answers it. */
static __always_inline int reject_tcp(struct __sk_buff *skb, struct reject_scratch *sc, const struct pkt *p)
{
	struct tcphdr *th = (struct tcphdr *)sc->th, *r = (struct tcphdr *)sc->rst;
	__u32 seglen, hlen;
	__s64 sum;
	int off;

	if (bpf_skb_load_bytes(skb, p->l4_off, th, sizeof(*th)))
		return -1;
	if (th->rst)
		return -1;
	hlen = th->doff * 4;
	if (ip_payload_len(skb, p, &seglen) || seglen < hlen)
		return -1;
	__builtin_memset(r, 0, sizeof(*r));
	r->source = th->dest;
	r->dest = th->source;
	r->doff = sizeof(*r) / 4;
	r->rst = 1;
	if (th->ack) {
		r->seq = th->ack_seq;
	} else {
		r->ack = 1;
		r->ack_seq = bpf_htonl(bpf_ntohl(th->seq) + th->syn + th->fin + seglen - hlen);
	}
	sum = pseudo_sum(sc, p, IPPROTO_TCP, sizeof(*r));
	r->check = csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)r, sizeof(*r), sum));

	off = reject_headers(skb, sc, p, IPPROTO_TCP, sizeof(*r));
	if (off < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, r, sizeof(*r), BPF_F_RECOMPUTE_CSUM);
}

/* icmp_unreach is the 8-byte header of an ICMP or ICMPv6 error. */
struct icmp_unreach {
	__u8 type;
	__u8 code;
	__sum16 check;
	__u32 unused;
};

/* reject_icmp turns p into the ICMP (ICMPv6) port unreachable that
 * answers it.
 */
static __always_inline int reject_icmp(struct __sk_buff *skb, struct reject_scratch *sc, const struct pkt *p)
{
	struct icmp_unreach h = {
		.type = p->is_v6 ? ICMPV6_DEST_UNREACH : ICMP_DEST_UNREACH,
		.code = p->is_v6 ? ICMPV6_PORT_UNREACH : ICMP_PORT_UNREACH,
	};
	__u8 proto = p->is_v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP;
	__u32 qlen = p->l4_off - ETH_HLEN + 8;
	__s64 sum = 0;
	int off;

	/* IP header lengths are multiples of 4, extension headers of 8. */
	if (qlen > QUOTE_MAX)
		qlen = QUOTE_MAX;
	qlen &= ~3U;
	if (qlen < 28 || qlen > QUOTE_MAX)
		return -1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, sc->quote, qlen))
		return -1;
	if (p->is_v6)
		sum = pseudo_sum(sc, p, IPPROTO_ICMPV6, sizeof(h) + qlen);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&h, sizeof(h), sum);
	h.check = csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)sc->quote, qlen, sum));

	off = reject_headers(skb, sc, p, proto, sizeof(h) + qlen);
	if (off < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, off, &h, sizeof(h), BPF_F_RECOMPUTE_CSUM))
		return -1;
	return bpf_skb_store_bytes(skb, off + sizeof(h), sc->quote, qlen, BPF_F_RECOMPUTE_CSUM);
}

/* reject turns p, sent by the pod to a frontend without a backend, into
 * its refusal. It returns 0, or -1 when there is nothing to send (a TCP
 * reset, a truncated packet) or a helper failed. A global function, checked
 * once by the verifier (see nat_rewrite).
 */
__attribute__((noinline)) int reject(struct __sk_buff *skb, const struct pkt *p)
{
	struct reject_scratch *sc;
	__u32 zero = 0;

	if (!skb || !p)
		return -1;
	sc = bpf_map_lookup_elem(&lockstep_reject_scratch, &zero);
	if (!sc)
		return -1;
	if (p->proto == IPPROTO_TCP)
		return reject_tcp(skb, sc, p);
	return reject_icmp(skb, sc, p);
}

#endif /* LOCKSTEP_REJECT_H */
