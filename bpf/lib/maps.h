/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Map definitions and the key/value structs shared with Go.
 *
 * Every struct here has a Go twin in lockstep.dev/lockstep/maps; a test
 * compares their sizes and offsets with this object's BTF. Change both, or
 * neither. All addresses are 16 bytes: IPv4 as IPv4-mapped IPv6
 * (::ffff:a.b.c.d). Values that exist twice ([2]) are the two buffered
 * copies selected by the parity of lockstep_state.gen.
 */
#ifndef LOCKSTEP_MAPS_H
#define LOCKSTEP_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define PIN_BY_NAME 1 /* LIBBPF_PIN_BY_NAME */

/* READ_ONCE_GEN reads lockstep_state.gen exactly once. */
#define READ_ONCE_GEN(st) (*(volatile __u32 *)&(st)->gen)

#define DIR_INGRESS 0
#define DIR_EGRESS 1

#define EP_INGRESS_ISOLATED (1 << 0)
#define EP_EGRESS_ISOLATED (1 << 1)
/* No rule of the direction names PEER_ANY: policy skips that lookup. A
 * clear bit (as in flags written before the bit existed) means "look". */
#define EP_INGRESS_NO_ANY (1 << 2)
#define EP_EGRESS_NO_ANY (1 << 3)
/* The endpoint's to_pod takes the SYNs from_uplink routes
 * (lockstep_routed_syn): its agent knows host routing. Agents that do not
 * write it clear, and from_uplink then leaves their SYNs to the stack. */
#define EP_ROUTED_SYN (1 << 4)

#define PEER_ANY 0
#define PEER_WORLD 2
#define NO_CIDR_CLASS 0x80000000U

#define MAX_PORT_RANGES 16
/* policy_value.nranges of a bucketed rule's chunk 0 (see policy_key). */
#define RULE_BUCKETED 0x80000000U
#define RULE_SHIFT(nranges) (((nranges) >> 16) & 0xf)

/* Reasons index lockstep_drops and fill event.reason. */
enum reason {
	REASON_ALLOWED_NEW = 0,   /* allowed, new connection tracked */
	REASON_POLICY_INGRESS = 1,
	REASON_POLICY_EGRESS = 2,
	REASON_SPOOFED = 3,
	REASON_NO_ENDPOINT = 4,
	REASON_UNPARSEABLE = 5,
	REASON_ALLOWED_NODE = 6,  /* allowed, new: the node's own packet to its pod */
	REASON_SERVICE_NO_BACKEND = 7, /* to a Service frontend without a ready backend: refused; without a local one (SVC_NO_LOCAL): dropped */
	REASON_CT_SHARE = 8, /* a new connection beyond its endpoint's conntrack share: dropped */
	REASON_SERVICE_PORT_CLASH = 9, /* a new connection to a frontend whose translated tuple no free source port could make unique: dropped */
	REASON_MAX = 10,
};

enum verdict {
	VERDICT_ALLOW = 0,
	VERDICT_DROP = 1,
	VERDICT_REJECT = 2, /* dropped, and answered with a TCP reset or ICMP unreachable */
};

struct v6addr {
	__u8 addr[16];
};

struct state {
	__u32 gen;      /* parity p = gen & 1 selects the live copy */
	__u32 reserved; /* zero; the monitor flag is lockstep_monitor's */
};

struct endpoint_info {
	__u8 flags[2]; /* per parity: EP_* */
	__u8 has_v4;
	__u8 has_v6;
	struct v6addr ipv4; /* ::ffff:a.b.c.d */
	struct v6addr ipv6;
};

struct policy_outer_key {
	__u32 ifindex;
	__u32 parity;
};

/* A rule of at most MAX_PORT_RANGES port ranges is one entry, chunk 0.
 * One of more is bucketed: its chunk 0 holds no range and says
 * RULE_BUCKETED with a shift s (4 to 15) in nranges, and the ranges within
 * ports [b << s, (b + 1) << s) are in chunk 1 + b, clipped to them, for
 * every bucket b that has any. A bucket of 16 ports holds at most 8
 * disjoint ranges, so every rule fits; the agent picks the largest s whose
 * buckets fit, which makes the fewest entries. nranges' low 16 bits count
 * an entry's ranges.
 */
struct policy_key {
	__u32 peer;
	__u8 dir;
	__u8 proto;
	__u16 chunk;
};

struct port_range {
	__u16 lo;
	__u16 hi;
};

/* rule names, for verdict events, the policy rule that allowed the key
 * (a chunk 0 value's): an id the agent keeps the name of, 0 when unknown.
 * The programs never decide by it. */
struct policy_value {
	__u32 nranges;
	__u32 rule;
	struct port_range ranges[MAX_PORT_RANGES];
};

struct ipcache_value {
	__u32 identity[2];
	__u32 cidr_class[2];
};

struct cidr_key {
	__u32 prefixlen;
	struct v6addr addr;
};

struct cidr_value {
	__u32 cidr_class[2];
};

/* The ends of a connection in canonical order (see lib/ct.h): port[i]
 * belongs to addr[i]. No direction: one entry serves both.
 */
struct ct_key {
	__u32 ifindex;
	__u8 proto;
	__u8 pad;
	__u16 port[2]; /* host byte order */
	__u16 pad2;
	struct v6addr addr[2];
};

/* ct_entry.flags: bit (dir << 1 | o) is set once a packet in dir whose
 * sender is end o of the key was allowed as a new connection.
 */
struct ct_entry {
	__u64 expires; /* bpf_ktime_get_coarse_ns() deadline */
	__u32 flags;
	__u32 pad;
};

/* Flags of lockstep_svc_ct entries, beside ct_entry's bits. The translation
 * of an entry applies to one orientation only: CT_SVC_FWD to the packets
 * of the orientation its bit allowed (the client's, to the frontend),
 * CT_SVC_REV to their replies (the backend's, to the client).
 */
#define CT_SVC_FWD (1U << 8)     /* destination := nat (the backend) */
#define CT_SVC_REV (1U << 9)     /* source := nat (the frontend) */
#define CT_SVC_HAIRPIN (1U << 10) /* client and backend are one pod: see lib/service.h */
#define CT_SVC (CT_SVC_FWD | CT_SVC_REV)

/* Flags of entries of both tables: the TCP connection is closing (see
 * lib/ct.h). A pure SYN that finds such an entry starts a new connection.
 */
#define CT_FIN (1U << 11) /* a FIN was seen */
#define CT_RST (1U << 12) /* a RST was seen */
#define CT_CLOSING (CT_FIN | CT_RST)

/* Flag of entries of both tables: a TCP connection between the pod and a
 * pod of another node, whose packets the programs route past the node's
 * stack both ways when they can (lib/route.h).
 */
#define CT_ROUTED (1U << 13)

/* Flag of a CT_SVC_FWD entry: the connection's frontend carries a mark
 * (svc_value.mark, kube-proxy's masquerade mark) and its backend is not
 * BACKEND_LOCAL, so every packet the client sends gets the mark
 * (lib/service.h).
 */
#define CT_SVC_MARK (1U << 14)

/* A connection lockstep translated for a Service: the flags and lifetime
 * of a ct_entry, and the address and port the translation writes. Keyed
 * by a ct_key like lockstep_ct; one entry for the tuple the client sends
 * (client, frontend), one for the tuple after translation (client,
 * backend), whose replies are translated back.
 */
struct svc_ct_entry {
	__u64 expires;
	__u32 flags;
	__u16 nat_port; /* host byte order */
	/* Zero, or the client's port on the other side of the translation,
	 * when lockstep gave the connection another source port (a clash:
	 * see svc_claim_tuple): in a CT_SVC_FWD entry the port its packets
	 * leave with, in a CT_SVC_REV entry the client's own, which replies
	 * go back to. Host byte order. */
	__u16 peer_port;
	struct v6addr nat_addr;
};

/* One slot of lockstep_ct_cache: a copy of a conntrack entry that a lookup
 * found live, used until valid_until while lockstep_ct_epoch still holds
 * epoch (see the flow cache in lib/ct.h). Zero: empty. The nat fields
 * copy those of a lockstep_svc_ct entry (zero for lockstep_ct's).
 */
struct ct_cache_slot {
	struct ct_key key;
	__u32 epoch;
	__u64 valid_until; /* bpf_ktime_get_coarse_ns() */
	__u32 flags;
	__u16 nat_port;
	__u16 peer_port;
	struct v6addr nat_addr;
};

/* Service frontends (lockstep_services): a ClusterIP, port and protocol.
 * count says, per parity, how many backends the frontend has in
 * lockstep_backends; SVC_ABSENT that the parity has no such frontend;
 * SVC_NO_LOCAL that it has none for this node's pods while other nodes
 * have some (internalTrafficPolicy Local): new connections are dropped.
 */
#define SVC_ABSENT 0xffff
#define SVC_NO_LOCAL 0xfffe

struct svc_key {
	struct v6addr addr;
	__u16 port; /* host byte order */
	__u8 proto;
	__u8 pad;
};

struct svc_value {
	__u32 id;          /* names the frontend's backends and affinity entries */
	__u16 count[2];    /* per parity: backends in slots 0..count-1, SVC_ABSENT or SVC_NO_LOCAL */
	__u32 affinity[2]; /* per parity: sessionAffinity ClientIP timeout, seconds; 0: none */
	__u32 mark[2];     /* per parity: ORed into the mark of every packet its clients send to a backend not BACKEND_LOCAL (CT_SVC_MARK); 0: none */
};

/* One backend of a frontend in one parity: each parity has its own slots,
 * so Apply rewrites the idle parity's in place.
 */
struct backend_key {
	__u32 id;
	__u16 slot;
	__u8 parity;
	__u8 pad;
};

struct backend_value {
	struct v6addr addr;
	__u16 port;  /* host byte order */
	__u16 flags; /* BACKEND_LOCAL */
};

/* BACKEND_LOCAL: the backend is a pod of this node. A connection to an
 * external frontend that picks it is not masqueraded (lib/service.h). */
#define BACKEND_LOCAL (1U << 0)

/* sessionAffinity ClientIP: the backend a client's last connection to a
 * frontend went to, and when it was last used.
 */
struct affinity_key {
	__u32 id;
	struct v6addr client;
};

struct affinity_value {
	__u64 last; /* bpf_ktime_get_coarse_ns() */
	struct v6addr addr;
	__u16 port;
	__u16 slot;
	__u32 pad;
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

struct event {
	__u32 ifindex;
	__u8 dir;
	__u8 verdict;
	__u8 reason;
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u32 peer;
	struct v6addr saddr;
	struct v6addr daddr;
	__u32 rule; /* policy_value.rule of the entry that allowed it, else 0 */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct state);
	__uint(pinning, PIN_BY_NAME);
} lockstep_state SEC(".maps");

/* lockstep_monitor[0] non-zero: emit verdict events. Its own map, so that
 * `lockstep monitor` and the agent's generation flips never write the same
 * value and neither can undo the other's write.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, PIN_BY_NAME);
} lockstep_monitor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct endpoint_info);
	__uint(pinning, PIN_BY_NAME);
} lockstep_endpoints SEC(".maps");

/* lockstep_uplinks: the node's devices from_uplink is attached to, by
 * ifindex (the value is unused). from_pod routes a packet itself only out
 * of one of them, so that the replies come in where from_uplink sees them
 * (lib/route.h). Key 0 (no device's) is there while any device is: host
 * routing is on. Empty: the programs route nothing.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, PIN_BY_NAME);
} lockstep_uplinks SEC(".maps");

/* lockstep_routed_syn: per CPU, the conntrack key of the TCP SYN
 * from_uplink just sent to a pod's host veth past the node's stack. The
 * redirect runs to_pod at once on the same CPU, which marks the entry it
 * makes for that SYN CT_ROUTED and clears the slot (lib/route.h). Pinned,
 * so that the programs of a restarted agent and those its predecessor
 * attached share it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_key);
	__uint(pinning, PIN_BY_NAME);
} lockstep_routed_syn SEC(".maps");

/* The template of every inner policy map. Go creates one per endpoint
 * whose rules changed, sized to its rules (hash maps of one outer map may
 * differ in max_entries).
 */
struct policy_inner {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct policy_key);
	__type(value, struct policy_value);
};

/* policy_inner_btf only carries the full BTF of policy_key and
 * policy_value into the object: clang-16 emits just forward declarations
 * for the key and value of an __array inner map. Go never creates it.
 */
struct policy_inner policy_inner_btf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, struct policy_outer_key);
	__uint(pinning, PIN_BY_NAME);
	__array(values, struct policy_inner);
} lockstep_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6addr);
	__type(value, struct ipcache_value);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ipcache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cidr_key);
	__type(value, struct cidr_value);
	__uint(pinning, PIN_BY_NAME);
} lockstep_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct SEC(".maps");

/* The conntrack shares of an endpoint (lib/ct.h): the entries it may hold
 * in lockstep_ct and lockstep_svc_ct together, per direction the
 * connections were opened in: what others open towards a pod never spends
 * the share of what the pod opens itself. Both maps are keyed by
 * ct_share_key (ifindex << 1 | dir). lockstep_ct_share counts the entries
 * the programs created and the new connections they refused beyond the
 * share; lockstep_ct_released, written by the agent only, how many of
 * those created are gone (expired and deleted, or evicted), and at
 * CT_RECLAIM_KEY when its reclaimer last ran: the shares are enforced only
 * while it runs, for without it nothing is ever released. Each map has one
 * writer per field, so neither loses the other's counts. 16384 slots: both
 * directions of every endpoint, and as many of removed ones whose slots
 * wait for the agent's flush.
 *
 * The shares are enforced only while the node's tables are under
 * pressure: while the node's estimate of the entries held in both tables
 * together, counted like an endpoint's at CT_NODE_KEY of both maps (every
 * entry the programs admit, whatever its endpoint, slot or exemption),
 * would pass CT_PRESSURE. Half of one table: the estimate is never below
 * either table's fill, so until it passes neither table is half full, and
 * once it has, an endpoint beyond its share creates nothing more: the
 * other half, as many entries as four endpoints at both their shares,
 * stays for the endpoints within theirs before the LRU evicts anything.
 *
 * Keys of ifindex 0, which no endpoint has: 0 (ingress) holds in
 * lockstep_ct_released the reclaimer's heartbeat (CT_RECLAIM_KEY) and is
 * unused in lockstep_ct_share; 1 (egress) is the node's (CT_NODE_KEY) in
 * both maps. No key is left free.
 */
#define CT_SHARE 16384
#define CT_SHARE_SLOTS 16384
#define CT_RECLAIM_KEY 0 /* ifindex 0, ingress: no endpoint's slot */
#define CT_NODE_KEY 1    /* ifindex 0, egress: the node's estimate */
#define CT_PRESSURE 65536 /* half of lockstep_ct (and of lockstep_svc_ct) */
#define CT_RECLAIM_STALE (30ULL * 1000000000ULL) /* three missed reclaims */

struct ct_share {
	__u64 created; /* entries created (atomic adds) */
	__u64 refused; /* new connections refused beyond the share */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CT_SHARE_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct ct_share);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_share SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CT_SHARE_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_released SEC(".maps");

/* The per-CPU flow cache in front of lockstep_ct (lib/ct.h). */
#define CT_CACHE_SLOTS 64

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CT_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct ct_cache_slot);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_cache SEC(".maps");

/* lockstep_ct_epoch[0] changes after userspace deletes conntrack entries,
 * which drops every cached copy (lib/ct.h).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_epoch SEC(".maps");

/* Evictions of the conntrack tables: how many entries each LRU dropped to
 * make room. The kernel does not count them, so they are derived: the
 * programs count in lockstep_ct_inserted, per CPU, the entries they add
 * under a new key (CT_TABLE_CT: lockstep_ct, CT_TABLE_SVC:
 * lockstep_svc_ct); the agent, the only writer of lockstep_ct_evictions,
 * counts there the entries it deletes, and its reclaimer, which counts
 * those left, derives evicted = inserted + untracked - deleted - left.
 * See agent/datapath/ctevict.go.
 */
#define CT_TABLE_CT 0
#define CT_TABLE_SVC 1
#define CT_TABLES 2

struct ct_evictions {
	__u64 deleted;   /* entries the agent deleted */
	__u64 untracked; /* entries found that no insert counted (made before the count) */
	__u64 evicted;   /* the last count the agent derived; it never goes down */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CT_TABLES);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_inserted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CT_TABLES);
	__type(key, __u32);
	__type(value, struct ct_evictions);
	__uint(pinning, PIN_BY_NAME);
} lockstep_ct_evictions SEC(".maps");

/* Service translation. Capacities (the agent refuses a state beyond them
 * with an error): 32768 frontends and 131072 backends per parity; both
 * parities share each map. 65536 translated connections (two entries
 * each) and 65536 clients with affinity, least recently used first out.
 */
#define SVC_MAX_FRONTENDS 32768
#define SVC_MAX_BACKENDS 131072

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * SVC_MAX_FRONTENDS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
	__uint(pinning, PIN_BY_NAME);
} lockstep_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * SVC_MAX_BACKENDS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_key);
	__type(value, struct backend_value);
	__uint(pinning, PIN_BY_NAME);
} lockstep_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct_key);
	__type(value, struct svc_ct_entry);
	__uint(pinning, PIN_BY_NAME);
} lockstep_svc_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct affinity_key);
	__type(value, struct affinity_value);
	__uint(pinning, PIN_BY_NAME);
} lockstep_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, REASON_MAX);
	__type(key, __u32);
	__type(value, struct counter);
	__uint(pinning, PIN_BY_NAME);
} lockstep_drops SEC(".maps");

/* Per-policy verdict counters, which the agent sums by policy for
 * /metrics (agent/datapath/verdictcount.go). They count whether or not
 * events are emitted, and cost nothing on the established fast path.
 *
 * lockstep_rule_allowed[id]: the new connections the rule of id (a
 * policy_value.rule) allowed. The agent hands out ids 1 to RULE_IDS - 1,
 * reuses those no map holds, and writes 0 when none is left; id 0 (no
 * rule, or none left) is never counted.
 *
 * lockstep_denied: the packets an isolated direction of an endpoint
 * dropped because no rule allowed them (default deny), keyed like
 * lockstep_ct_share (ifindex << 1 | dir); the agent deletes a removed
 * endpoint's slots.
 *
 * Neither is pinned: rule ids mean nothing to the next agent, so the
 * counts start with the agent that names them.
 */
#define RULE_IDS 16384

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RULE_IDS);
	__type(key, __u32);
	__type(value, __u64);
} lockstep_rule_allowed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, CT_SHARE_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u64);
} lockstep_denied SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__uint(pinning, PIN_BY_NAME);
} lockstep_events SEC(".maps");

/* event_btf carries the BTF of struct event (ring buffer records have no
 * declared type) for Go and bpftool. Go never creates it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event);
} event_btf SEC(".maps");

#endif /* LOCKSTEP_MAPS_H */
