/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet parsing: Ethernet, IPv4/IPv6 (with a bounded walk over IPv6
 * extension headers) and the L4 ports connection tracking and policy need.
 * Headers are read straight from the skb's linear data when it holds them,
 * else with bpf_skb_load_bytes, so non-linear skbs parse too (see load).
 */
#ifndef LOCKSTEP_PARSE_H
#define LOCKSTEP_PARSE_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"

#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#define MAX_EXT_HDRS 8

#define ICMP_ECHOREPLY 0
#define ICMP_ECHO 8
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129
#define ICMPV6_MLD_QUERY 130    /* RFC 2710 */
#define ICMPV6_MLD_REPORT 131
#define ICMPV6_MLD_DONE 132
#define ICMPV6_ROUTER_SOL 133   /* RFC 4861 */
#define ICMPV6_ROUTER_ADV 134
#define ICMPV6_NEIGH_SOL 135
#define ICMPV6_NEIGH_ADV 136
#define ICMPV6_REDIRECT 137
#define ICMPV6_MLD2_REPORT 143  /* RFC 3810 */

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

enum parse_result {
	PARSE_OK = 0,     /* addresses and (if any) ports known */
	PARSE_PASS,       /* ARP: always passes */
	PARSE_ND,         /* IPv6 neighbour discovery or MLD (lib/nd.h) */
	PARSE_NOT_IP,     /* neither IPv4 nor IPv6 */
	PARSE_BAD_L3,     /* truncated or malformed IP header */
	PARSE_BAD_L4,     /* addresses known, L4 header not (fragment, too many
			   * extension headers, truncated) */
};

/* struct pkt is what the programs know about one packet. */
struct pkt {
	struct v6addr saddr;
	struct v6addr daddr;
	__u16 sport; /* host byte order; ICMP echo id for echo */
	__u16 dport;
	__u8 proto; /* final L4 protocol number */
	__u8 is_v6;
	__u8 tcp_flags;
	__u8 icmp_err; /* an ICMP or ICMPv6 error: it quotes a packet at l4_off + 8 */
	__u32 l4_off;  /* offset of the L4 header in the frame, once parsed */
	__u8 icmp_type; /* ICMPv6 type, for PARSE_ND only */
	__u8 hop_limit; /* IPv6 only */
	__u8 frag;      /* IPv6: a fragment header was seen */
	__u8 pad;
};

/* skb_data and skb_data_end read the packet bounds, each with one load
 * straight off the context: the verifier refuses a context field read
 * through a pointer the compiler derived from the context (it would merge
 * the two reads).
 */
static __always_inline void *skb_data(struct __sk_buff *skb)
{
	void *p;

	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(offsetof(struct __sk_buff, data)));
	return p;
}

static __always_inline void *skb_data_end(struct __sk_buff *skb)
{
	void *p;

	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(offsetof(struct __sk_buff, data_end)));
	return p;
}

/* load copies len bytes at offset off of the frame to dst. Headers are
 * almost always in the linear data, where a bounds check is all a read
 * costs; a bpf_skb_load_bytes call costs some 25 ns, and a parse reads three
 * headers or more. The helper stays the fallback for headers in paged data,
 * and for offsets of 16 KiB or more, which the verifier could not bound
 * (it tracks packet offsets up to 64 KiB, offset and length together).
 * len must be a constant.
 */
static __always_inline int load(struct __sk_buff *skb, __u32 off, void *dst, __u32 len)
{
	void *data = skb_data(skb);
	void *data_end = skb_data_end(skb);

	if (off < 0x4000 && data + off + len <= data_end) {
		__builtin_memcpy(dst, data + off, len);
		return 0;
	}
	return bpf_skb_load_bytes(skb, off, dst, len);
}

static __always_inline void v4_mapped(struct v6addr *dst, __be32 a)
{
	__u32 *w = (__u32 *)dst->addr;

	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0x0000ffff);
	w[3] = a;
}

static __always_inline int addr_eq(const struct v6addr *a, const struct v6addr *b)
{
	const __u64 *x = (const __u64 *)a->addr;
	const __u64 *y = (const __u64 *)b->addr;

	return x[0] == y[0] && x[1] == y[1];
}

/* echo_ports fills p's ports for an ICMP echo of identifier id: the
 * requester's end carries the identifier, the other end 0. A reply then
 * matches its request's reversed tuple, and a request the peer sends with
 * the same identifier does not: it is a connection of its own, judged by
 * policy, as netfilter's conntrack tells requests from replies by type.
 */
static __always_inline void echo_ports(struct pkt *p, int request, __u16 id)
{
	p->sport = request ? id : 0;
	p->dport = request ? 0 : id;
}
/* parse_l4 reads ports at off for proto. */
static __always_inline int parse_l4(struct __sk_buff *skb, struct pkt *p, __u32 off)
{
	p->l4_off = off;
	switch (p->proto) {
	case IPPROTO_TCP: {
		__u8 h[14];

		if (load(skb, off, h, sizeof(h)))
			return PARSE_BAD_L4;
		p->sport = ((__u16)h[0] << 8) | h[1];
		p->dport = ((__u16)h[2] << 8) | h[3];
		p->tcp_flags = h[13];
		return PARSE_OK;
	}
	case IPPROTO_UDP:
	case IPPROTO_SCTP: {
		__be16 ports[2];

		/* UDP and the SCTP common header both start with the ports. */
		if (load(skb, off, ports, sizeof(ports)))
			return PARSE_BAD_L4;
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 h[8]; /* type, code, checksum, id, sequence */

		/* ICMP in IPv6, or ICMPv6 in IPv4, is just another protocol. */
		if (p->proto != (p->is_v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP))
			return PARSE_OK;
		if (load(skb, off, h, sizeof(h)))
			return PARSE_BAD_L4;
		if (p->is_v6) {
			/* Router/neighbour solicitation and advertisement,
			 * redirect (133-137) and MLD (130-132, 143). */
			if ((h[0] >= ICMPV6_MLD_QUERY && h[0] <= ICMPV6_REDIRECT) || h[0] == ICMPV6_MLD2_REPORT) {
				p->icmp_type = h[0];
				return PARSE_ND;
			}
			/* Destination unreachable, packet too big, time
			 * exceeded, parameter problem. */
			p->icmp_err = h[0] >= 1 && h[0] <= 4;
			if (h[0] != ICMPV6_ECHO_REQUEST && h[0] != ICMPV6_ECHO_REPLY)
				return PARSE_OK;
		} else if (h[0] != ICMP_ECHO && h[0] != ICMP_ECHOREPLY) {
			/* Destination unreachable, time exceeded, parameter
			 * problem. */
			p->icmp_err = h[0] == 3 || h[0] == 11 || h[0] == 12;
			return PARSE_OK;
		}
		echo_ports(p, h[0] == ICMP_ECHO || h[0] == ICMPV6_ECHO_REQUEST, ((__u16)h[4] << 8) | h[5]);
		return PARSE_OK;
	}
	}
	return PARSE_OK;
}

static __always_inline int parse_ipv4(struct __sk_buff *skb, struct pkt *p)
{
	struct iphdr ip;
	__u32 off = ETH_HLEN;

	if (load(skb, off, &ip, sizeof(ip)))
		return PARSE_BAD_L3;
	if (ip.version != 4 || ip.ihl < 5)
		return PARSE_BAD_L3;
	v4_mapped(&p->saddr, ip.saddr);
	v4_mapped(&p->daddr, ip.daddr);
	p->proto = ip.protocol;
	/* A non-first fragment carries no L4 header. */
	if (ip.frag_off & bpf_htons(0x1fff))
		return PARSE_BAD_L4;
	return parse_l4(skb, p, off + ip.ihl * 4);
}

static __always_inline int parse_ipv6(struct __sk_buff *skb, struct pkt *p)
{
	struct ipv6hdr ip6;
	__u32 off = ETH_HLEN;
	__u8 nexthdr;
	int i;

	if (load(skb, off, &ip6, sizeof(ip6)))
		return PARSE_BAD_L3;
	if (ip6.version != 6)
		return PARSE_BAD_L3;
	__builtin_memcpy(p->saddr.addr, &ip6.saddr, 16);
	__builtin_memcpy(p->daddr.addr, &ip6.daddr, 16);
	p->is_v6 = 1;
	p->hop_limit = ip6.hop_limit;
	nexthdr = ip6.nexthdr;
	off += sizeof(ip6);

	for (i = 0; i < MAX_EXT_HDRS; i++) {
		__u8 h[4];

		switch (nexthdr) {
		case NEXTHDR_HOP:
		case NEXTHDR_ROUTING:
		case NEXTHDR_DEST:
			if (load(skb, off, h, 2))
				return PARSE_BAD_L4;
			nexthdr = h[0];
			off += ((__u32)h[1] + 1) * 8;
			break;
		case NEXTHDR_AUTH:
			if (load(skb, off, h, 2))
				return PARSE_BAD_L4;
			nexthdr = h[0];
			off += ((__u32)h[1] + 2) * 4;
			break;
		case NEXTHDR_FRAGMENT:
			if (load(skb, off, h, 4))
				return PARSE_BAD_L4;
			nexthdr = h[0];
			p->proto = nexthdr;
			p->frag = 1;
			/* Fragment offset is the top 13 bits of bytes 2-3. */
			if ((((__u16)h[2] << 8) | h[3]) & 0xfff8)
				return PARSE_BAD_L4;
			off += 8;
			break;
		default:
			p->proto = nexthdr;
			return parse_l4(skb, p, off);
		}
	}
	p->proto = nexthdr;
	return PARSE_BAD_L4;
}

/* parse_icmp_quote fills in with the tuple of the packet that the ICMP
 * error whose header is at off quotes (its IP header, then at least 8 bytes
 * of its L4 header), of the error's own family. It returns 0 when the
 * quote is of a packet connection tracking knows (TCP, UDP, SCTP, ICMP
 * echo, no IPv6 extension headers, not a later fragment), -1 otherwise.
 */
static __always_inline int parse_icmp_quote(struct __sk_buff *skb, __u32 off, __u8 is_v6, struct pkt *in)
{
	__u8 echo_req = is_v6 ? ICMPV6_ECHO_REQUEST : ICMP_ECHO;
	__u8 echo_rep = is_v6 ? ICMPV6_ECHO_REPLY : ICMP_ECHOREPLY;
	__u8 icmp = is_v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP;
	__u8 l4[8];

	off += 8; /* type, code, checksum, and 4 bytes the type defines */
	if (!is_v6) {
		struct iphdr ip;

		if (load(skb, off, &ip, sizeof(ip)))
			return -1;
		if (ip.version != 4 || ip.ihl < 5 || (ip.frag_off & bpf_htons(0x1fff)))
			return -1;
		v4_mapped(&in->saddr, ip.saddr);
		v4_mapped(&in->daddr, ip.daddr);
		in->proto = ip.protocol;
		off += ip.ihl * 4;
	} else {
		struct ipv6hdr ip6;

		if (load(skb, off, &ip6, sizeof(ip6)))
			return -1;
		if (ip6.version != 6)
			return -1;
		__builtin_memcpy(in->saddr.addr, &ip6.saddr, 16);
		__builtin_memcpy(in->daddr.addr, &ip6.daddr, 16);
		in->is_v6 = 1;
		in->proto = ip6.nexthdr;
		off += sizeof(ip6);
	}
	if (load(skb, off, l4, sizeof(l4)))
		return -1;
	if (in->proto == IPPROTO_TCP || in->proto == IPPROTO_UDP || in->proto == IPPROTO_SCTP) {
		in->sport = ((__u16)l4[0] << 8) | l4[1];
		in->dport = ((__u16)l4[2] << 8) | l4[3];
		return 0;
	}
	if (in->proto == icmp && (l4[0] == echo_req || l4[0] == echo_rep)) {
		echo_ports(in, l4[0] == echo_req, ((__u16)l4[4] << 8) | l4[5]);
		return 0;
	}
	return -1;
}

/* parse_packet fills p from the frame in skb. */
static __always_inline int parse_packet(struct __sk_buff *skb, struct pkt *p)
{
	__be16 h_proto;

	if (load(skb, __builtin_offsetof(struct ethhdr, h_proto), &h_proto, sizeof(h_proto)))
		return PARSE_NOT_IP;
	switch (h_proto) {
	case bpf_htons(ETH_P_ARP):
		return PARSE_PASS;
	case bpf_htons(ETH_P_IP):
		return parse_ipv4(skb, p);
	case bpf_htons(ETH_P_IPV6):
		return parse_ipv6(skb, p);
	}
	return PARSE_NOT_IP;
}

#endif /* LOCKSTEP_PARSE_H */
