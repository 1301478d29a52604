/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Service translation in from_pod, before policy: Kubernetes judges
 * NetworkPolicy on the pod that receives a connection, so a packet a pod
 * sends to a Service frontend (ClusterIP, port, protocol) is translated to
 * a backend first and policy is judged on the backend's address and port.
 *
 * A new connection to a frontend (lockstep_services, in the packet's
 * parity, like the policy it is judged by):
 *   - without backends, is refused (lib/reject.h) and counted as
 *     service-no-backend; without one for this node's pods (SVC_NO_LOCAL:
 *     internalTrafficPolicy Local), dropped and counted the same;
 *   - else gets a backend: the client's affinity backend while its entry
 *     (lockstep_affinity) is younger than the frontend's timeout, else one
 *     at random, which becomes the client's affinity backend even when
 *     policy denies the connection (kube-proxy's nat table records it
 *     before the filter table judges); egress policy is judged on it; two
 *     lockstep_svc_ct entries record the connection: the client's tuple
 *     (translated to the backend, CT_SVC_FWD) and the translated tuple
 *     (whose replies are translated back to the frontend, CT_SVC_REV);
 *     the frontend's mark, if any (and the backend is on another node),
 *     is ORed into the translated packet's, and into those of every later
 *     packet the client sends (CT_SVC_MARK).
 *
 * External frontends (an externalIP, a load-balancer IP, a NodePort on the
 * node's address) carry kube-proxy's masquerade mark when their backend is
 * on another node: kube-proxy masquerades its own translations of them,
 * and the mark makes its POSTROUTING rule masquerade lockstep's as well,
 * so that backend's node judges the node's address either way. A backend
 * on this node (BACKEND_LOCAL) gets the connection unmasqueraded: with
 * kube-proxy, the node's FORWARD chain judges its ingress before the
 * masquerade, on the client pod, and so does to_pod without one. The
 * node's nat table reads the mark only when
 * its conntrack starts a connection, which may be later than lockstep's
 * first packet: a first packet dropped before the node confirmed it, a UDP
 * flow the node forgot before lockstep did, a flushed table. So every
 * packet the client sends carries it. Their connections are never
 * host-routed (lib/route.h), which would pass that rule by; the node's
 * conntrack undoes the masquerade on the reply, which to_pod then
 * translates back.
 * Later packets and replies find those entries in ct_lookup and are
 * translated alike (svc_tracked), whatever lockstep_services says by then:
 * a connection keeps its backend, as conntrack keeps it for kube-proxy.
 *
 * Hairpin: a pod that reaches itself through its Service would receive a
 * packet from its own address, which its kernel drops. The source becomes
 * the frontend's address (the source port stays), the reply is translated
 * back, and both go straight back to the pod (bpf_redirect_peer), without
 * the node's routing or to_pod: ingress policy of the pod is judged in
 * from_pod, with the pod itself as the peer.
 *
 * Source port clashes: a pod's kernel gives two connections one source
 * port when their destinations differ, and two frontends (two ports of a
 * Service, two Services) may send them to one backend port: translated,
 * their tuples would be one. kube-proxy's conntrack then gives the second
 * another source port; so does lockstep (svc_claim_tuple), from
 * SVC_PORT_MIN to SVC_PORT_MAX, above the kernel's default ephemeral
 * range so that the pod's own later connections do not take it, and drops
 * the connection's first packet (REASON_SERVICE_PORT_CLASH) when none of
 * SVC_PORT_TRIES ports is free; the client's retry draws again. The
 * entries record the two ports (peer_port). A direct connection the pod
 * opens on a translated one's tuple afterwards is not kept apart: it
 * matches the translated connection's entries.
 *
 * SCTP: its CRC32c covers the ports, and no helper can update it. lockstep
 * translates an SCTP frontend only when its backends listen on the
 * Service port (the agent leaves other SCTP frontends out of the map, and
 * a backend on another port is left untranslated here too): then only
 * addresses change, which the CRC does not cover. Other SCTP Services stay
 * kube-proxy's, judged on the ClusterIP.
 */
#ifndef LOCKSTEP_SERVICE_H
#define LOCKSTEP_SERVICE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "parse.h"
#include "ct.h"
#include "nat.h"
#include "policy.h"
#include "reject.h"
#include "route.h"
#include "scratch.h"
#include "verdict.h"

/* SVC_PASS: the packet is not translated; the caller goes on as without
 * Services. Any other svc_connect result is a tc action. */
#define SVC_PASS (-1)

/* The source ports a clash draws from (see above), and how many draws. */
#define SVC_PORT_MIN 61000
#define SVC_PORT_MAX 65535
#define SVC_PORT_TRIES 8

/* svc_lookup returns the frontend p is addressed to and sets *n to its
 * backend count in parity, or returns NULL when parity has none.
 */
static __always_inline struct svc_value *svc_lookup(const struct pkt *p, __u32 parity, __u16 *n)
{
	struct svc_key k = {
		.addr = p->daddr,
		.port = p->dport,
		.proto = p->proto,
	};
	struct svc_value *sv;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP && p->proto != IPPROTO_SCTP)
		return NULL;
	sv = bpf_map_lookup_elem(&lockstep_services, &k);
	if (!sv)
		return NULL;
	*n = sv->count[parity & 1];
	if (*n == SVC_ABSENT)
		return NULL;
	return sv;
}

/* svc_pick chooses the backend of a new connection from client p to
 * frontend sv, whose parity has n > 0 backends: the client's affinity
 * backend while it is still one of them and its entry has not timed out,
 * else one at random. It copies it to s->b and its slot to *slot.
 */
static __always_inline int svc_pick(const struct svc_value *sv, __u32 parity, __u16 n, const struct pkt *p,
				    __u64 now, struct svc_scratch *s, __u16 *slot)
{
	struct backend_key bk = {
		.id = sv->id,
		.parity = parity & 1,
	};
	__u32 timeout = sv->affinity[parity & 1];
	struct backend_value *v;

	if (timeout) {
		struct affinity_value *a;

		s->ak.id = sv->id;
		s->ak.client = p->saddr;
		a = bpf_map_lookup_elem(&lockstep_affinity, &s->ak);
		if (a && now - a->last < (__u64)timeout * NSEC_PER_SEC && a->slot < n) {
			bk.slot = a->slot;
			v = bpf_map_lookup_elem(&lockstep_backends, &bk);
			if (v && addr_eq(&v->addr, &a->addr) && v->port == a->port) {
				s->b = *v;
				*slot = bk.slot;
				return 0;
			}
		}
	}
	bk.slot = bpf_get_prandom_u32() % n;
	v = bpf_map_lookup_elem(&lockstep_backends, &bk);
	if (!v)
		return -1;
	s->b = *v;
	*slot = bk.slot;
	return 0;
}

/* svc_affinity_set records s->b (slot) as client p's backend of sv. */
static __always_inline void svc_affinity_set(const struct svc_value *sv, const struct pkt *p,
					     struct svc_scratch *s, __u16 slot, __u64 now)
{
	s->ak.id = sv->id;
	s->ak.client = p->saddr;
	s->av.last = now;
	s->av.addr = s->b.addr;
	s->av.port = s->b.port;
	s->av.slot = slot;
	s->av.pad = 0;
	bpf_map_update_elem(&lockstep_affinity, &s->ak, &s->av, BPF_ANY);
}

/* svc_affinity_touch keeps the affinity entry of a busy connection fresh:
 * p is a packet from the client to the frontend, h its entry, which a
 * lookup just refreshed (about once a second while packets flow). The
 * affinity timeout then runs from the connection's last packet.
 */
static __always_inline void svc_affinity_touch(const struct pkt *p, const struct ct_hit *h, __u64 now)
{
	struct svc_key k = {.addr = p->daddr, .port = p->dport, .proto = p->proto};
	struct affinity_key ak = {.client = p->saddr};
	struct affinity_value *a;
	struct svc_value *sv;

	sv = bpf_map_lookup_elem(&lockstep_services, &k);
	if (!sv)
		return;
	ak.id = sv->id;
	a = bpf_map_lookup_elem(&lockstep_affinity, &ak);
	if (a && a->port == h->nat_port && addr_eq(&a->addr, &h->nat_addr) && a->last < now)
		a->last = now;
}

/* svc_mark_again ORs into skb's mark that of the frontend packet p of a
 * CT_SVC_MARK connection is addressed to, in either parity (they differ
 * only while a change is applied), when the frontend is still there.
 */
static __always_inline void svc_mark_again(struct __sk_buff *skb, const struct pkt *p)
{
	struct svc_key k = {.addr = p->daddr, .port = p->dport, .proto = p->proto};
	struct svc_value *sv;

	sv = bpf_map_lookup_elem(&lockstep_services, &k);
	if (sv)
		skb->mark |= sv->mark[0] | sv->mark[1];
}

/* svc_to_pod hands a packet from_pod rewrote back to the pod it came from
 * (hairpin, refusals): Ethernet addresses swapped, into the ingress of the
 * peer of the veth ifindex (the caller's, read once: see svc_tracked).
 */
static __always_inline int svc_to_pod(struct __sk_buff *skb, __u32 ifindex)
{
	if (swap_macs(skb))
		return TC_ACT_SHOT;
	return bpf_redirect_peer(ifindex, 0);
}

/* svc_close_twin marks closing, on a FIN or RST p of a translated
 * connection (h) that is translated from one side (src: its source, else
 * its destination), the connection's other lockstep_svc_ct entry: that of
 * the tuple p has after translation (see ct_mark_twin).
 */
static __always_inline void svc_close_twin(__u32 ifindex, const struct pkt *p, const struct ct_hit *h,
					   int src, __u64 now)
{
	struct svc_scratch *s;

	if (!(p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)))
		return;
	s = svc_scratch();
	if (!s)
		return;
	s->t = *p;
	if (src) {
		s->t.saddr = h->nat_addr;
		s->t.sport = h->nat_port;
		if (h->peer_port)
			s->t.dport = h->peer_port;
	} else {
		s->t.daddr = h->nat_addr;
		s->t.dport = h->nat_port;
		if (h->peer_port)
			s->t.sport = h->peer_port;
	}
	ct_fill_key(&s->k, ifindex, &s->t);
	ct_mark_twin(&s->k, &s->t, now);
}

/* svc_tracked translates a packet of a connection ct_lookup found in
 * lockstep_svc_ct (h), sent by end o of its key in dir at the endpoint of
 * ifindex, and returns the tc action.
 *
 * ifindex is the caller's, read once: clang may otherwise keep a pointer
 * into the context across the calls below, which the verifier refuses.
 */
static __always_inline int svc_tracked(struct __sk_buff *skb, __u32 ifindex, const struct pkt *p, __u8 dir,
				       __u32 o, const struct ct_hit *h, __u64 now)
{
	__u32 fwd, rev;
	struct pkt t;

	if (dir == DIR_INGRESS) {
		/* to_pod sees one kind only: a backend's reply to the client
		 * (forward translation and hairpin replies are from_pod's). */
		if ((h->flags & (CT_SVC_REV | CT_SVC_HAIRPIN)) != CT_SVC_REV || !(h->flags & ct_bit(DIR_EGRESS, o ^ 1)))
			return TC_ACT_OK;
		svc_close_twin(ifindex, p, h, 1, now);
		if (h->peer_port) {
			t = *p;
			t.saddr = h->nat_addr;
			t.sport = h->nat_port;
			t.dport = h->peer_port;
			return nat_rewrite(skb, p, &t) ? TC_ACT_SHOT : TC_ACT_OK;
		}
		return nat_one(skb, p, p->is_v6 ? IP6_SADDR_OFF : IP4_SADDR_OFF, p->l4_off, &p->saddr,
			       &h->nat_addr, p->sport, h->nat_port) ? TC_ACT_SHOT : TC_ACT_OK;
	}
	fwd = (h->flags & CT_SVC_FWD) && (h->flags & ct_bit(dir, o));
	rev = (h->flags & CT_SVC_REV) && (h->flags & ct_bit(dir ^ 1, o ^ 1));
	if (!fwd && !rev)
		return TC_ACT_OK;
	if (fwd && h->refreshed)
		svc_affinity_touch(p, h, now);
	if (fwd && !(h->flags & CT_SVC_HAIRPIN)) {
		if (h->flags & CT_SVC_MARK)
			svc_mark_again(skb, p);
		svc_close_twin(ifindex, p, h, 0, now);
		if (h->peer_port) {
			t = *p;
			t.daddr = h->nat_addr;
			t.dport = h->nat_port;
			t.sport = h->peer_port;
			if (nat_rewrite(skb, p, &t))
				return TC_ACT_SHOT;
		} else if (nat_one(skb, p, p->is_v6 ? IP6_DADDR_OFF : IP4_DADDR_OFF, p->l4_off + 2, &p->daddr,
				   &h->nat_addr, p->dport, h->nat_port)) {
			return TC_ACT_SHOT;
		}
		if (!(h->flags & CT_ROUTED))
			return TC_ACT_OK;
		t = *p;
		t.daddr = h->nat_addr;
		t.dport = h->nat_port;
		if (h->peer_port)
			t.sport = h->peer_port;
		return route_out(skb, &t);
	}
	if (!(h->flags & CT_SVC_HAIRPIN))
		return TC_ACT_OK; /* a client's packet matching its reply entry: not translated */
	/* Hairpin: both addresses change, and the packet goes back to the pod. */
	t = *p;
	if (fwd) {
		t.daddr = h->nat_addr;
		t.dport = h->nat_port;
		t.saddr = p->daddr;
		if (h->peer_port)
			t.sport = h->peer_port;
	} else {
		t.saddr = h->nat_addr;
		t.sport = h->nat_port;
		t.daddr = p->saddr;
		if (h->peer_port)
			t.dport = h->peer_port;
	}
	if (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) {
		struct ct_key k;

		ct_fill_key(&k, ifindex, &t);
		ct_mark_twin(&k, &t, now);
	}
	if (nat_rewrite(skb, p, &t))
		return TC_ACT_SHOT;
	return svc_to_pod(skb, ifindex);
}

/* svc_related translates an ICMP error p in dir about a connection
 * lockstep translates (h, found for the quoted packet in, of orientation
 * o), as conntrack translates it for kube-proxy, so that the client's
 * kernel finds the socket it is about: an error travelling to the client
 * about a translated packet (the backend's port unreachable, a router's
 * packet too big) quotes the frontend and comes from it when the backend
 * sent it; one the client sends about a reply it saw from the frontend
 * goes to the backend, quoting it. Hairpin connections' errors stay
 * untranslated. Returns the tc action.
 */
static __always_inline int svc_related(struct __sk_buff *skb, const struct pkt *p, const struct pkt *in,
				       __u8 dir, __u32 o, const struct ct_hit *h)
{
	__u32 fwd;

	if (!(h->flags & CT_SVC) || (h->flags & CT_SVC_HAIRPIN))
		return TC_ACT_OK;
	if ((h->flags & CT_SVC_REV) && (h->flags & ct_bit(dir ^ 1, o)))
		fwd = 0;
	else if ((h->flags & CT_SVC_FWD) && (h->flags & ct_bit(dir, o ^ 1)))
		fwd = 1;
	else
		return TC_ACT_OK;
	if (nat_icmp_quote(skb, p, in, h, fwd))
		return TC_ACT_SHOT;
	/* The error's own address, when the quoted packet's translated end
	 * (the backend, or for the client's errors the frontend) sent it or
	 * is to get it; a router's address stays. */
	if (addr_eq(fwd ? &p->daddr : &p->saddr, fwd ? &in->saddr : &in->daddr) &&
	    nat_icmp_outer(skb, p, h, fwd))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

/* svc_tuple_taken reports whether key k, that of a translation of the
 * first packet of client p's new connection, is another live connection's
 * at the endpoint: a translated one's or, when lockstep tracks it, a
 * direct one's. own: k keeps p's source port, so that a reverse entry of
 * p's frontend without another port is this very connection's, left by an
 * earlier attempt. A connection a RST closed is over; one a FIN closed may
 * still be sending the other way (half-closed), and keeps its tuple.
 */
static __always_inline int svc_tuple_taken(const struct ct_key *k, const struct pkt *p, int own, __u64 now)
{
	struct svc_ct_entry *s = bpf_map_lookup_elem(&lockstep_svc_ct, k);
	struct ct_entry *v;

	if (s && s->expires >= now && !(s->flags & CT_RST) &&
	    !(own && (s->flags & CT_SVC_REV) && !s->peer_port && s->nat_port == p->dport &&
	      addr_eq(&s->nat_addr, &p->daddr)))
		return 1;
	v = bpf_map_lookup_elem(&lockstep_ct, k);
	return v && v->expires >= now && !(v->flags & CT_RST);
}

/* svc_claim_tuple makes t, the translation of p, the first packet of a
 * new connection from the pod of ifindex, a tuple no other connection has
 * there: as it is, or with a source port drawn from SVC_PORT_MIN to
 * SVC_PORT_MAX (never for SCTP, whose CRC covers the ports). It returns
 * 0, or -1 when the tuple stays taken (t as it was).
 *
 * A global function: the verifier checks it once.
 */
__attribute__((noinline)) int svc_claim_tuple(__u32 ifindex, const struct pkt *p, struct pkt *t, __u64 now)
{
	struct ct_key key; /* on the stack: older verifiers take no argument memory as a map key */
	__u32 i;

	if (!p || !t)
		return -1;
	ct_fill_key(&key, ifindex, t);
	if (!svc_tuple_taken(&key, p, 1, now))
		return 0;
	if (p->proto == IPPROTO_SCTP)
		return -1;
	for (i = 0; i < SVC_PORT_TRIES; i++) {
		t->sport = SVC_PORT_MIN + bpf_get_prandom_u32() % (SVC_PORT_MAX - SVC_PORT_MIN + 1);
		ct_fill_key(&key, ifindex, t);
		if (!svc_tuple_taken(&key, p, 0, now))
			return 0;
	}
	t->sport = p->sport; /* the client's port in the drop's event */
	return -1;
}

/* svc_connect handles the first packet p of a connection the pod of
 * ifindex (endpoint flags of the packet's parity) opens to frontend sv,
 * which has n backends in parity. It returns the tc action, or SVC_PASS
 * when the packet stays untranslated.
 */
static __always_inline int svc_connect(struct __sk_buff *skb, __u32 ifindex, const struct pkt *p,
				       const struct svc_value *sv, __u16 n, __u32 parity, __u8 flags,
				       __u64 now)
{
	struct svc_scratch *s;
	struct remote r = {};
	struct pkt *t;
	__u16 slot;
	__u32 o, hairpin, routed, rule = 0, self_rule = 0, mark = sv->mark[parity & 1];
	__u16 peer;

	if (n == 0) {
		verdict(skb, DIR_EGRESS, VERDICT_REJECT, REASON_SERVICE_NO_BACKEND, p, 0);
		if (reject(skb, p))
			return TC_ACT_SHOT;
		return svc_to_pod(skb, ifindex);
	}
	/* kube-proxy drops these without an answer ("has no local
	 * endpoints"): the Service has backends, none for this node. */
	if (n == SVC_NO_LOCAL)
		return verdict(skb, DIR_EGRESS, VERDICT_DROP, REASON_SERVICE_NO_BACKEND, p, 0);
	s = svc_scratch();
	if (!s)
		return SVC_PASS;
	if (svc_pick(sv, parity, n, p, now, s, &slot))
		return SVC_PASS;
	if (p->proto == IPPROTO_SCTP && s->b.port != p->dport)
		return SVC_PASS;
	if (s->b.flags & BACKEND_LOCAL)
		mark = 0;
	/* The choice is the client's affinity backend whatever policy then
	 * decides, as kube-proxy's nat table records it before the filter
	 * table judges the connection. */
	if (sv->affinity[parity & 1])
		svc_affinity_set(sv, p, s, slot, now);

	t = &s->t;
	*t = *p;
	t->daddr = s->b.addr;
	t->dport = s->b.port;
	hairpin = addr_eq(&s->b.addr, &p->saddr);
	if (hairpin)
		t->saddr = p->daddr;

	if (flags & EP_EGRESS_ISOLATED) {
		remote_lookup(&t->daddr, parity, &r);
		if (!policy_allows(ifindex, parity, DIR_EGRESS, t, &r, flags & EP_EGRESS_NO_ANY, &rule))
			return deny(skb, ifindex, DIR_EGRESS, t, r.identity);
	}
	if (hairpin && (flags & EP_INGRESS_ISOLATED)) {
		struct remote self = {};

		remote_lookup(&p->saddr, parity, &self);
		if (!policy_allows(ifindex, parity, DIR_INGRESS, t, &self, flags & EP_INGRESS_NO_ANY, &self_rule))
			return deny(skb, ifindex, DIR_INGRESS, t, self.identity);
	}

	if (!ct_admit(ifindex, DIR_EGRESS, 2, 0, now))
		return verdict(skb, DIR_EGRESS, VERDICT_DROP, REASON_CT_SHARE, t, r.identity);
	if (svc_claim_tuple(ifindex, p, t, now))
		return verdict(skb, DIR_EGRESS, VERDICT_DROP, REASON_SERVICE_PORT_CLASH, t, r.identity);
	peer = t->sport != p->sport ? t->sport : 0;
	/* A backend on another node may be reached and answer past the
	 * node's stack (lib/route.h), but for a masquerade the stack does. */
	routed = !hairpin && !mark && route_new(p, &s->b.addr) ? CT_ROUTED : 0;
	o = ct_fill_key(&s->k, ifindex, p);
	ct_create_svc(&s->k, ct_bit(DIR_EGRESS, o),
		      CT_SVC_FWD | (hairpin ? CT_SVC_HAIRPIN : 0) | routed | (mark ? CT_SVC_MARK : 0), &s->b.addr,
		      s->b.port, peer, p, now, &s->n);
	o = ct_fill_key(&s->k, ifindex, t);
	/* Hairpin: the translated packet reaches the pod from the frontend's
	 * address, as if it came in; its replies go out through from_pod. */
	ct_create_svc(&s->k, hairpin ? ct_bit(DIR_INGRESS, o) : ct_bit(DIR_EGRESS, o),
		      CT_SVC_REV | (hairpin ? CT_SVC_HAIRPIN : 0) | routed, &p->daddr, p->dport, peer ? p->sport : 0,
		      p, now, &s->n);

	if (nat_rewrite(skb, p, t))
		return verdict(skb, DIR_EGRESS, VERDICT_DROP, REASON_UNPARSEABLE, t, r.identity);
	verdict_rule(skb, DIR_EGRESS, VERDICT_ALLOW, REASON_ALLOWED_NEW, t, r.identity, rule);
	/* The pod's own ingress rule allowed the hairpin connection too. */
	count_rule(self_rule);
	if (hairpin)
		return svc_to_pod(skb, ifindex);
	if (routed)
		return route_out(skb, t);
	skb->mark |= mark;
	return TC_ACT_OK;
}

#endif /* LOCKSTEP_SERVICE_H */
