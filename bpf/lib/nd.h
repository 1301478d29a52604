/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* IPv6 link control: neighbour and router discovery and redirects
 * (RFC 4861), multicast listener discovery (MLDv1, RFC 2710; MLDv2,
 * RFC 3810), and the unspecified source address (::, RFC 4291 2.5.2).
 *
 * These messages pass without policy, as a link needs them, but only as
 * the RFCs allow them on a link: a node must discard the rest, and a pod
 * must not be able to use them to reach past the node or to speak for
 * someone else. The hop limits carry the RFCs' proof of locality: a
 * router decrements the hop limit of whatever it forwards, so an ND
 * message with hop limit 255 was sent on the link it arrives on, and an
 * MLD message with hop limit 1 is never forwarded. A pod's link has two
 * ends: what the pod sends is checked here, what the node's own stack
 * sends it is the node's, and a forwarded message is never valid.
 */
#ifndef LOCKSTEP_ND_H
#define LOCKSTEP_ND_H

#include "maps.h"
#include "parse.h"

#define ND_HOP_LIMIT 255  /* RFC 4861 6.1, 7.1, 8.1 */
#define MLD_HOP_LIMIT 1   /* RFC 2710 3, RFC 3810 5 */

/* addr_unspec reports whether a is ::. */
static __always_inline int addr_unspec(const struct v6addr *a)
{
	const __u64 *w = (const __u64 *)a->addr;

	return w[0] == 0 && w[1] == 0;
}

/* addr_linklocal reports whether a is in fe80::/10. */
static __always_inline int addr_linklocal(const struct v6addr *a)
{
	return a->addr[0] == 0xfe && (a->addr[1] & 0xc0) == 0x80;
}

/* addr_v4mapped reports whether a is in ::ffff:0:0/96, the IPv4-mapped
 * addresses, which are how the programs key IPv4: on an IPv6 packet they
 * would be looked up as IPv4 peers. They are not for the wire (RFC 4291
 * 2.5.5.2), and the kernel drops IPv6 packets from them on receive.
 */
static __always_inline int addr_v4mapped(const struct v6addr *a)
{
	const __u32 *w = (const __u32 *)a->addr;

	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0x0000ffff);
}

/* addr_link_mcast reports whether a is in ff02::/16, link-scope multicast. */
static __always_inline int addr_link_mcast(const struct v6addr *a)
{
	return a->addr[0] == 0xff && a->addr[1] == 0x02;
}

/* addr_solicited_node reports whether a is in ff02::1:ff00:0/104, the
 * solicited-node multicast addresses (RFC 4291 2.7.1).
 */
static __always_inline int addr_solicited_node(const struct v6addr *a)
{
	const __u32 *w = (const __u32 *)a->addr;

	return w[0] == bpf_htonl(0xff020000) && w[1] == 0 && w[2] == bpf_htonl(0x00000001) &&
	       a->addr[12] == 0xff;
}

/* addr_all_mld2_routers reports whether a is ff02::16, where MLDv2
 * reports go (RFC 3810 5.2.14).
 */
static __always_inline int addr_all_mld2_routers(const struct v6addr *a)
{
	const __u32 *w = (const __u32 *)a->addr;

	return w[0] == bpf_htonl(0xff020000) && w[1] == 0 && w[2] == 0 && w[3] == bpf_htonl(0x16);
}

/* unspec_ok reports whether p, a packet from ::, is one of the two a node
 * sends before it has an address (RFC 4291 2.5.2: :: is never a source
 * otherwise): the neighbour solicitation of duplicate address detection,
 * to a solicited-node address (RFC 4861 7.1.1, RFC 4862 5.4.2), and the
 * MLDv2 report of that address's group, to ff02::16 (RFC 3810 5.2.13).
 * The ND rules below still apply to both.
 */
static __always_inline int unspec_ok(const struct pkt *p)
{
	if (p->proto != IPPROTO_ICMPV6)
		return 0;
	if (p->icmp_type == ICMPV6_NEIGH_SOL)
		return addr_solicited_node(&p->daddr);
	if (p->icmp_type == ICMPV6_MLD2_REPORT)
		return addr_all_mld2_routers(&p->daddr);
	return 0;
}

/* nd_ok reports whether the ND or MLD message p (PARSE_ND), sent by the
 * pod, may pass. Its source has passed anti-spoofing: one of the pod's
 * addresses, link-local, or :: as unspec_ok allows.
 *
 *   - No fragment header (RFC 6980 5).
 *   - To the link only: a link-local or ff02::/16 destination. MLDv1
 *     reports to a group of wider scope are dropped too: nothing routes
 *     multicast off a pod's link.
 *   - ND: hop limit 255. Router solicitation and neighbour advertisement
 *     not from :: (RFC 4861 4.1, 4.4; lockstep runs no router to answer a
 *     solicitation from ::). No router advertisement and no redirect: a
 *     pod is no router (RFC 4861 6.2, 8; a pod's advertisement is the
 *     rogue advertisement of RFC 6104).
 *   - MLD: hop limit 1 and a link-local source (RFC 2710 3, RFC 3810 5),
 *     or :: for an MLDv2 report (unspec_ok).
 *
 * What reaches the pod needs no such rules: the node's own stack builds
 * its messages by the RFCs (and is trusted, as for isolation), and a
 * forwarded message is invalid whatever it says, its hop limit lowered
 * by the forwarding (see handle).
 */
static __always_inline int nd_ok(const struct pkt *p)
{
	const struct v6addr *s = &p->saddr, *d = &p->daddr;

	if (p->frag || (!addr_linklocal(d) && !addr_link_mcast(d)))
		return 0;
	switch (p->icmp_type) {
	case ICMPV6_ROUTER_SOL:
	case ICMPV6_NEIGH_SOL:
	case ICMPV6_NEIGH_ADV:
		return p->hop_limit == ND_HOP_LIMIT;
	case ICMPV6_ROUTER_ADV:
	case ICMPV6_REDIRECT:
		return 0;
	}
	/* MLD: 130-132, 143. */
	return p->hop_limit == MLD_HOP_LIMIT && (addr_linklocal(s) || addr_unspec(s));
}

#endif /* LOCKSTEP_ND_H */
