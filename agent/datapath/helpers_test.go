//go:build linux

package datapath

import (
	"cmp"
	"encoding/binary"
	"errors"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// tc actions the programs return.
const (
	actOK   = 0 // TC_ACT_OK
	actShot = 2 // TC_ACT_SHOT
)

// loIfindex is the ifindex BPF_PROG_TEST_RUN gives a packet run without a
// context: the loopback device of the caller's netns. Program tests key
// their endpoint by it and never attach anything to lo.
const loIfindex = 1

// privatePinRoot mounts a private bpffs on a temporary directory,
// unmounted when tb ends, and returns a pin root inside it.
func privatePinRoot(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		tb.Fatalf("mount private bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return filepath.Join(dir, "lockstep")
}

// newTestDatapath loads a Datapath pinned on a private bpffs mounted on a
// temporary directory, all removed when tb ends.
func newTestDatapath(tb testing.TB) *Datapath {
	tb.Helper()
	root := privatePinRoot(tb)
	d, err := Load(Options{PinRoot: root})
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	tb.Cleanup(func() {
		d.Close()
		if err := Remove(root); err != nil {
			tb.Errorf("Remove: %v", err)
		}
	})
	return d
}

// fakeAttach records ifname as attached at ifindex without touching any
// interface, so Apply accepts it.
func (d *Datapath) fakeAttach(ifname string, ifindex int) {
	d.mu.Lock()
	d.recordAttach(ifname, ifindex)
	d.mu.Unlock()
}

// waitSettled waits until the settler has brought the idle parity's
// inner maps and Service backends up to the live ones, and deleted the
// frontends the live parity lacks (it has nothing left it could do).
func (d *Datapath) waitSettled(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		live := int(d.mirror.gen & 1)
		pending := 0
		for _, e := range d.mirror.eps {
			im := e.inner[live^1]
			if ep := e.src[live]; ep != nil && e.src[live^1] != ep && im != nil && im.known && fits(im.capacity, len(ep.Rules)) {
				pending++
			}
		}
		for _, e := range d.mirror.svcs {
			if e.v.Count[live] == bpfmaps.SvcAbsent || e.src[live^1] != e.src[live] || e.v.Count[live] != e.v.Count[live^1] {
				pending++
			}
		}
		err := d.settler.err
		d.mu.Unlock()
		if pending == 0 {
			return
		}
		if err != nil {
			tb.Fatalf("settle: %v", err)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d endpoints' idle rules still not settled after 10s", pending)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// flushCT empties lockstep_ct and lockstep_svc_ct, forgets every
// endpoint's share use, and bumps the epoch, as a flush does.
func (d *Datapath) flushCT(tb testing.TB) {
	tb.Helper()
	deleteCTEntries(tb, d)
	for _, m := range []*ebpf.Map{d.ctShare, d.ctReleased} {
		var keys []uint32
		var k uint32
		var v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			keys = append(keys, k)
		}
		if err := it.Err(); err != nil {
			tb.Fatalf("list share slots: %v", err)
		}
		if err := deleteAll(m, keys); err != nil {
			tb.Fatalf("delete share slots: %v", err)
		}
	}
	if err := d.bumpCTEpoch(); err != nil {
		tb.Fatalf("flush CT: %v", err)
	}
}

// deleteCTEntries empties lockstep_ct and lockstep_svc_ct and leaves the
// flow caches alone.
func deleteCTEntries(tb testing.TB, d *Datapath) {
	tb.Helper()
	for _, table := range []*ebpf.Map{d.ct, d.svcCT} {
		var keys []bpfmaps.CTKey
		var k bpfmaps.CTKey
		for {
			err := table.NextKey(keys2prev(keys), &k)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			if err != nil {
				tb.Fatalf("list conntrack entries: %v", err)
			}
			keys = append(keys, k)
		}
		for _, k := range keys {
			if err := table.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				tb.Fatalf("delete conntrack entries: %v", err)
			}
		}
	}
}

// keys2prev is the key NextKey continues after: the last of keys, or nil
// for the first.
func keys2prev(keys []bpfmaps.CTKey) any {
	if len(keys) == 0 {
		return nil
	}
	return keys[len(keys)-1]
}

// onOneCPU keeps the calling goroutine on one CPU until the test ends, so
// that successive test runs of a program share that CPU's flow cache.
func onOneCPU(tb testing.TB) {
	tb.Helper()
	runtime.LockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("read CPU affinity: %v", err)
	}
	for cpu := range 1024 {
		if was.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("pin to one CPU: %v", err)
	}
	tb.Cleanup(func() {
		if err := unix.SchedSetaffinity(0, &was); err != nil {
			tb.Errorf("restore CPU affinity: %v", err)
		}
		runtime.UnlockOSThread()
	})
}

// fillCTCache writes s into every slot of every CPU's flow cache.
func (d *Datapath) fillCTCache(tb testing.TB, s bpfmaps.CTCacheSlot) {
	tb.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(d.pinRoot, bpfmaps.CTCacheMap), nil)
	if err != nil {
		tb.Fatalf("open the flow cache: %v", err)
	}
	defer m.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		tb.Fatal(err)
	}
	perCPU := slices.Repeat([]bpfmaps.CTCacheSlot{s}, ncpu)
	for i := range m.MaxEntries() {
		if err := m.Update(i, perCPU, ebpf.UpdateExist); err != nil {
			tb.Fatalf("fill flow cache slot %d: %v", i, err)
		}
	}
}

// ctEpochNow returns lockstep_ct_epoch[0].
func (d *Datapath) ctEpochNow(tb testing.TB) uint32 {
	tb.Helper()
	var epoch uint32
	if err := d.ctEpoch.Lookup(uint32(0), &epoch); err != nil {
		tb.Fatalf("read the conntrack epoch: %v", err)
	}
	return epoch
}

// coarseNow is the programs' conntrack clock (bpf_ktime_get_coarse_ns).
func coarseNow(tb testing.TB) uint64 {
	tb.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		tb.Fatal(err)
	}
	return uint64(ts.Nano())
}

// packet describes a test frame.
type packet struct {
	src, dst     string
	proto        uint8
	sport, dport uint16
	icmpType     uint8   // ICMP/ICMPv6 type (echo by default)
	quote        *packet // for an ICMP error: the packet it quotes
	ext          []byte  // IPv6 extension headers (chain ends in proto)
	extFirst     uint8   // next header of the IPv6 header when ext is set
	fragOff      uint16  // IPv4 fragment offset in 8-byte units
	hopLimit     uint8   // IPv6 hop limit, IPv4 TTL (64 when zero)
	ethType      uint16  // overrides the IP ethertype
	// fromNode marks a packet the node's own stack sent: it reaches the
	// program with ingress_ifindex 0. Every other test packet was
	// forwarded by the node (see skbContext).
	fromNode bool
	// TCP: flags (SYN when zero), sequence and acknowledgment numbers.
	tcpFlags    uint8
	seq, ackSeq uint32
	payload     []byte // after the L4 header
}

const (
	protoICMP   = 1
	protoICMPv6 = 58
)

// frame hand-builds an Ethernet frame for p. Checksums are left zero: the
// programs do not check them.
func frame(p packet) []byte {
	src, dst := netip.MustParseAddr(p.src), netip.MustParseAddr(p.dst)
	l4 := l4Header(p)
	eth := make([]byte, 14)
	copy(eth[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(eth[6:12], []byte{2, 0, 0, 0, 0, 1})
	var ip []byte
	if src.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], p.fragOff&0x1fff)
		ip[8] = ttl(p)
		ip[9] = p.proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(p.ext)+len(l4)))
		ip[6] = p.proto
		if p.ext != nil {
			ip[6] = p.extFirst
		}
		ip[7] = ttl(p)
		s, d := src.As16(), dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		ip = append(ip, p.ext...)
	}
	if p.ethType != 0 {
		binary.BigEndian.PutUint16(eth[12:], p.ethType)
	}
	return append(append(eth, ip...), l4...)
}

// ttl is the hop limit or TTL of p's frame.
func ttl(p packet) uint8 {
	if p.hopLimit == 0 {
		return 64
	}
	return p.hopLimit
}

func l4Header(p packet) []byte {
	switch p.proto {
	case policyapi.ProtoTCP:
		h := make([]byte, 20)
		binary.BigEndian.PutUint16(h[0:], p.sport)
		binary.BigEndian.PutUint16(h[2:], p.dport)
		binary.BigEndian.PutUint32(h[4:], p.seq)
		binary.BigEndian.PutUint32(h[8:], p.ackSeq)
		h[12] = 5 << 4
		h[13] = 0x02 // SYN
		if p.tcpFlags != 0 {
			h[13] = p.tcpFlags
		}
		binary.BigEndian.PutUint16(h[14:], 65535)
		return append(h, p.payload...)
	case policyapi.ProtoUDP:
		h := make([]byte, 8)
		binary.BigEndian.PutUint16(h[0:], p.sport)
		binary.BigEndian.PutUint16(h[2:], p.dport)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(p.payload)))
		return append(h, p.payload...)
	case policyapi.ProtoSCTP:
		h := make([]byte, 12)
		binary.BigEndian.PutUint16(h[0:], p.sport)
		binary.BigEndian.PutUint16(h[2:], p.dport)
		binary.BigEndian.PutUint32(h[4:], 0x5c7a9e01) // verification tag
		return append(h, p.payload...)
	case protoICMP, protoICMPv6:
		h := make([]byte, 8)
		h[0] = p.icmpType
		if h[0] == 0 && p.proto == protoICMP {
			h[0] = 8 // echo request
		} else if h[0] == 0 {
			h[0] = 128
		}
		binary.BigEndian.PutUint16(h[4:], p.sport) // echo id
		if p.quote != nil {
			// An error quotes the IP header and the first 8 bytes
			// of L4 of the packet it is about.
			q := frame(*p.quote)[14:]
			ihl := 40
			if q[0]>>4 == 4 {
				ihl = 20
			}
			clear(h[4:])
			h = append(h, q[:ihl+8]...)
		}
		return h
	}
	return make([]byte, 8)
}

// skbContext is the head of struct __sk_buff, up to ifindex: the context
// a test run passes to BPF_PROG_TEST_RUN, which copies ingress_ifindex
// into the skb's skb_iif and wants every other field here zero (ifindex 0
// keeps the caller's loopback device, loIfindex). A kernel that does not
// take ingress_ifindex refuses the context (EINVAL): the tests fail, they
// do not silently run forwarded packets as the node's.
type skbContext struct {
	Len, PktType, Mark, QueueMapping, Protocol uint32
	VlanPresent, VlanTCI, VlanProto, Priority  uint32
	IngressIfindex, Ifindex                    uint32
}

// forwardedIfindex is the ingress_ifindex of a test packet the node
// forwarded: the interface it arrived on. Any value but 0 will do, the
// programs only tell the node's own packets (0) from the rest.
const forwardedIfindex = 7

// runOptions runs data as a packet the node forwarded, or with fromNode
// as one the node's stack sent.
func runOptions(data []byte, fromNode bool) *ebpf.RunOptions {
	ctx := skbContext{IngressIfindex: forwardedIfindex}
	if fromNode {
		ctx.IngressIfindex = 0
	}
	return &ebpf.RunOptions{Data: data, Context: ctx}
}

// run runs prog on the frame of p and returns the tc action.
func run(tb testing.TB, prog *ebpf.Program, p packet) uint32 {
	tb.Helper()
	ret, err := prog.Run(runOptions(frame(p), p.fromNode))
	if err != nil {
		tb.Fatalf("run %s on %+v: %v", prog, p, err)
	}
	return ret
}

func actName(a uint32) string {
	switch a {
	case actOK:
		return "OK"
	case actShot:
		return "SHOT"
	}
	return "unknown"
}

func mustApply(tb testing.TB, d *Datapath, want *policy.Desired) {
	tb.Helper()
	if err := d.Apply(want); err != nil {
		tb.Fatalf("Apply: %v", err)
	}
}

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

type (
	netipAddr   = netip.Addr
	netipPrefix = netip.Prefix
	ebpfProgram = ebpf.Program
)

// runRaw runs prog on raw, a frame the node forwarded.
func runRaw(tb testing.TB, prog *ebpf.Program, raw []byte) uint32 {
	tb.Helper()
	ret, err := prog.Run(runOptions(raw, false))
	if err != nil {
		tb.Fatalf("run %s: %v", prog, err)
	}
	return ret
}

func sortRules(rules []bpfmaps.PolicyRule) {
	slices.SortFunc(rules, func(a, b bpfmaps.PolicyRule) int {
		return cmp.Or(cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Dir, b.Dir), cmp.Compare(a.Proto, b.Proto))
	})
}

// waitQuiet waits until a grace period has passed since the last flip, so
// that the next Apply does not wait for one.
func (d *Datapath) waitQuiet(tb testing.TB) {
	tb.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.waitQuiescent(); err != nil {
		tb.Fatal(err)
	}
}
