// Package datapath is lockstep's eBPF NetworkPolicy dataplane: it loads
// one verified BPF object for the node, attaches two of its programs to
// each pod's host-side veth and the third to the node's uplinks, and applies a [policy.Desired] to the pinned maps
// the programs read.
//
// # Programs and maps
//
// from_pod runs on tc ingress of the host veth (what the pod sends, policy
// direction egress) and to_pod on tc egress (what the pod receives,
// ingress). Both are classic cls_bpf filters in direct-action mode on a
// clsact qdisc: attaching one costs tens of microseconds, where a tcx link
// costs milliseconds on the machines we measured. No state is compiled
// into the programs; everything per pod lives in maps keyed by the host
// veth's ifindex, so a new pod costs two filter attachments and some map
// updates, never a compile or a verification.
//
// Every map is pinned by name under [Options.PinRoot] (default
// [DefaultPinRoot]) with BTF, so `bpftool map dump pinned PATH` shows field
// names, and so a restarted agent reuses the maps, and the filters keep
// enforcing the last applied state while the agent is down. [Datapath.Close]
// therefore unpins nothing; [Remove] does. When the pin root is not on a
// bpffs, [Load] mounts one there.
//
// # Make-before-break
//
// Each map entry that policy decisions read holds two copies of its
// value, and lockstep_state.gen selects one by parity; a packet reads gen
// once. [Datapath.Apply] writes the copies of the idle parity, then flips
// gen with one map update, then deletes what the new state no longer has.
// A packet therefore sees either the complete old state or the complete new
// one, never a mix.
//
// Apply is incremental: it remembers what each copy holds and touches only
// entries whose copy differs from the new state, so its cost follows the
// size of the change. A [policy.Desired] is immutable, so a table whose map
// is the very object the idle parity was written from (the address table
// and the CIDR table across a policy edit, as policy.Incremental hands them
// over) is skipped without a look at its entries, and so is an endpoint
// whose *policy.EndpointPolicy pointer did not change. Otherwise Apply
// compares contents: an equal state built anew writes nothing either.
// Because Apply trusts what it wrote, the agent's periodic resync calls
// Invalidate: the next Apply reads the maps back first, as Load does with
// a previous agent's maps, and repairs whatever changed behind its back.
//
// Each endpoint has one inner map of lockstep_policy per parity, and Apply
// rewrites the idle one in place: the rules that differ, nothing else.
// Replacing an inner map means updating the outer map, and the kernel
// follows every update or delete of a map-in-map from user space with an
// RCU grace period (milliseconds); that is left to an endpoint's arrival
// and departure and to a rule set outgrowing its inner map (sized with a
// quarter to spare), once per Apply for all endpoints together.
//
// After a flip the idle parity still holds the previous generation, which
// the next Apply would first have to catch up on. A background settler
// waits for a grace period after each flip, so that no packet that read
// the previous generation is still running, then rewrites the idle
// parity's inner maps to the live rules, unless an Apply came first. An
// edit then writes only its own change. The same grace period guards the
// idle parity itself: Apply writes it only once a grace period has passed
// since the last flip, waiting for the rest of it when the previous Apply
// was more recent, so that a packet that read gen before that flip and is
// still running never sees the idle parity change under it.
//
// Entries deleted after the flip can race with a packet that read gen just
// before it: such a packet may miss an address that was just removed and
// treat it as world. This only affects addresses the new state removes.
//
// # Connection tracking
//
// An allowed packet that starts a connection records it at the endpoint:
// one entry per connection, keyed by its two ends in a canonical order, its
// flags saying which end opened it in which direction. Later packets of the
// connection, and replies in the opposite direction, find it with one
// lookup and pass at once, before the endpoint, the generation or the
// policy is looked at. Because a tracked reply skips anti-spoofing, an
// ingress packet makes an entry only when it is addressed to one of the
// pod's own addresses (or is link-local ICMPv6, which the pod may answer
// from fe80::/10). Entries expire after 60 s idle (2 h for TCP once a
// packet with ACK was seen; 2 min once a FIN was seen, 10 s after a RST),
// measured on the coarse monotonic clock, and the table is an LRU. A pure
// SYN over the entry of a closed connection starts a new one, judged and
// translated anew. Each endpoint may hold a share of the entries (see
// ctshare.go): a background reclaimer deletes expired entries and tells
// the programs how many of each endpoint's went, and a new connection
// beyond the share is dropped. Policy changes do not cut established
// connections, as with most NetworkPolicy implementations. When an Apply
// removes an endpoint, the settler deletes its entries after the next grace period,
// so its veth passes nothing more while it lingers. Non-first fragments carry no
// ports and are dropped in isolated directions.
//
// # Services
//
// [policy.Desired.Services] is applied with the rest, in the same
// generation: frontends in lockstep_services (per parity a backend count,
// an affinity timeout and, for an external frontend, kube-proxy's
// masquerade mark, [Options.MasqueradeMark]), backends in
// lockstep_backends (per frontend, parity and slot; a pod of this node
// flagged, for which that mark is not set). Apply writes the idle
// parity's slots of the frontends whose *policy.ServiceEntry changed,
// compares contents otherwise, and keeps each backend in its slot from one
// generation to the next, so a change writes what changed. A removed frontend is made absent from the
// written parity; the settler deletes its entry and slots a grace period
// after the flip, with the idle parity's catch-up. A state with more
// frontends or backends than the maps hold is refused with
// ErrServiceCapacity before anything is written. The programs translate a
// pod's new connection to a frontend before policy and track it in
// lockstep_svc_ct (see bpf/lib/service.h); removed endpoints' entries
// there are flushed with their conntrack entries.
//
// With [Options.LeaveServicesToKubeProxy] (the agent's
// --service-translation=false) Apply writes no frontend and removes those
// the maps hold: pods' packets to a ClusterIP go on untranslated to
// kube-proxy, and egress policy judges them on the ClusterIP.
//
// # Host routing
//
// [Datapath.SetUplinks] attaches from_uplink to the tc ingress of the
// node's uplinks (tcx links pinned under the pin root's uplinks/, so they
// outlive the agent like the filters) and lists them in lockstep_uplinks.
// Then a connection a pod opens to a pod address is routed by the programs
// both ways, past the node's netfilter and routing code, when its route
// leaves through an uplink (see bpf/lib/route.h); everything else takes
// the stack. An empty list, or [Remove], detaches it.
//
// # Kernel requirements
//
// Linux 5.12 or later (bpf_check_mtu) with BTF-capable bpffs pinning: BPF ISA v3 (5.1),
// BPF ring buffers (5.8), bounded loops (5.3), hash-of-maps whose inner
// maps differ in size (5.10), bpf_ktime_get_coarse_ns (5.11), global BPF
// functions (5.6) and bpf_redirect_peer (5.10) for Services,
// BPF_PROG_TEST_RUN for sched_cls (tests), and the kernel's BTF
// (/sys/kernel/btf/vmlinux): the object reads sk_buff's ip_summed through
// a CO-RE relocation. On 6.3 or later a tracked translated packet's
// checksums are updated without a helper call (bpf_cast_to_kern_ctx, a
// weak kfunc: older kernels load the object and use the helper). On 6.16
// or later the translation of IPv6 addresses also keeps a
// CHECKSUM_COMPLETE skb->csum right (bpf_l4_csum_replace's BPF_F_IPV6);
// BPF_F_TEST_SKB_CHECKSUM_COMPLETE (tests) is from the same release. Host
// routing attaches through tcx links, Linux 6.6 or later: on older kernels
// SetUplinks fails, the agent says so, and every packet takes the stack.
// The agent needs
// CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN (for the bpffs mount), or root.
// On other systems the package builds so the agent does, and Load fails
// with an error wrapping errors.ErrUnsupported.
package datapath
