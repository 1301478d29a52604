//go:build linux

package datapath

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

const benchIdentities = 10000

// benchDesired is a node with benchIdentities remote pods (one identity
// each, 10.128.0.0/16 and fd00:128::/64) and an endpoint whose ingress
// allows TCP 80 from the first nrules identities.
func benchDesired(nrules int) *policy.Desired {
	d := &policy.Desired{
		Addrs: make(map[netip.Addr]policy.AddrEntry, 2*benchIdentities),
		CIDRs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"):  policyapi.NoCIDRClass,
			prefix("::/0"):       policyapi.NoCIDRClass,
			prefix("10.0.0.0/8"): policyapi.CIDRClassBit | 1,
		},
	}
	rules := make(map[policy.RuleKey][]policy.PortRange, nrules)
	for i := range benchIdentities {
		id := policyapi.FirstPodIdentity + policyapi.Peer(i)
		d.Addrs[benchAddr(i)] = policy.AddrEntry{Identity: id, CIDRClass: policyapi.NoCIDRClass}
		if i < nrules {
			rules[policy.RuleKey{Peer: id, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = ports(80, 80, 8000, 8100)
		}
	}
	d.Addrs[addr(podV4)] = policy.AddrEntry{Identity: 50000, CIDRClass: policyapi.NoCIDRClass}
	d.Endpoints = map[string]*policy.EndpointPolicy{podIf: {
		IPv4: addr(podV4), IngressIsolated: true, EgressIsolated: true, Rules: rules,
	}}
	return d
}

func benchAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 128, byte(i >> 8), byte(i)})
}

// BenchmarkPrivilegedVerdict measures the in-kernel cost of one verdict
// (BPF_PROG_TEST_RUN's own per-run time, not the syscall), with 10k
// remote identities and 100, 1k or 10k rules on the endpoint:
//   - deny: to_pod, a new connection no rule allows (ipcache, three rule
//     lookups)
//   - allow-new: to_pod, a new connection a rule allows, creating its CT
//     entry
//   - ct-hit: to_pod, a packet (an ACK) of an established connection (after its
//     first run, from the CPU's flow cache)
//   - ct-table: the same, found in the conntrack table (no CPU's flow
//     cache holds it)
//   - ct-reply: from_pod, the pod's reply on that connection
func BenchmarkPrivilegedVerdict(b *testing.B) {
	testenv.Privileged(b)
	for _, nrules := range []int{100, 1000, 10000} {
		d := newTestDatapath(b)
		d.fakeAttach(podIf, loIfindex)
		mustApply(b, d, benchDesired(nrules))
		// into is a packet from peer from to the pod: a SYN (new) or,
		// as every later packet of a connection, an ACK.
		into := func(from int, sport uint16, flags uint8) []byte {
			return frame(packet{src: benchAddr(from).String(), dst: podV4, proto: policyapi.ProtoTCP, sport: sport, dport: 80, tcpFlags: flags})
		}

		b.Run(fmt.Sprintf("rules=%d/deny", nrules), func(b *testing.B) {
			// The last identity has no rule (nrules < benchIdentities
			// except at 10k, where port 81 misses every range).
			pkt := frame(packet{src: benchAddr(benchIdentities - 1).String(), dst: podV4, proto: policyapi.ProtoTCP, sport: 1, dport: 81})
			benchRepeat(b, d.toPod, pkt, actShot)
		})
		b.Run(fmt.Sprintf("rules=%d/allow-new", nrules), func(b *testing.B) {
			// Every run is a new connection: a different allowed peer and
			// source port, so it misses CT and creates an entry. The kernel
			// repeats one packet, whose second run would hit the entry the
			// first created, so each run is its own BPF_PROG_TEST_RUN: compare
			// with BenchmarkPrivilegedVerdictFloor/single, not /repeat.
			frames := make([][]byte, 4096)
			for i := range frames {
				frames[i] = into(i%nrules, uint16(1024+i), tcpSYN)
			}
			d.flushCT(b)
			benchSingle(b, d.toPod, frames, actOK, func() { d.flushCT(b) })
		})
		b.Run(fmt.Sprintf("rules=%d/ct-hit", nrules), func(b *testing.B) {
			pkt := into(0, 999, tcpACK)
			d.flushCT(b)
			if ret := runRaw(b, d.toPod, into(0, 999, tcpSYN)); ret != actOK {
				b.Fatalf("first packet: %s", actName(ret))
			}
			benchRepeat(b, d.toPod, pkt, actOK)
		})
		b.Run(fmt.Sprintf("rules=%d/ct-table", nrules), func(b *testing.B) {
			// ct-hit's packet once no CPU's flow cache holds its
			// connection: found in lockstep_ct. Each run is its own
			// BPF_PROG_TEST_RUN, the caches emptied before it (the
			// epoch bumped): compare with BenchmarkPrivilegedVerdictFloor/single.
			pkt := into(0, 999, tcpACK)
			d.flushCT(b)
			if ret := runRaw(b, d.toPod, into(0, 999, tcpSYN)); ret != actOK {
				b.Fatalf("first packet: %s", actName(ret))
			}
			benchSingle(b, d.toPod, [][]byte{pkt}, actOK, func() {
				if err := d.bumpCTEpoch(); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(fmt.Sprintf("rules=%d/ct-reply", nrules), func(b *testing.B) {
			d.flushCT(b)
			if ret := runRaw(b, d.toPod, into(0, 999, tcpSYN)); ret != actOK {
				b.Fatalf("request: %s", actName(ret))
			}
			reply := frame(packet{src: podV4, dst: benchAddr(0).String(), proto: policyapi.ProtoTCP, sport: 80, dport: 999, tcpFlags: tcpACK})
			benchRepeat(b, d.fromPod, reply, actOK)
		})
	}
}

// benchSingle runs frames in turn, b.N runs of one BPF_PROG_TEST_RUN
// repetition each, and reports the mean of the kernel's per-run times
// (which leave the syscall out but not the test run's own set-up). refill,
// when set, runs untimed every len(frames) runs.
func benchSingle(b *testing.B, prog *ebpf.Program, frames [][]byte, want uint32, refill func()) {
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%len(frames) == 0 && i > 0 && refill != nil {
			b.StopTimer()
			refill()
			b.StartTimer()
		}
		ret, per, err := benchRun(prog, frames[i%len(frames)], 1, nil)
		if err != nil || ret != want {
			b.Fatalf("run: %v, %s", err, actName(ret))
		}
		total += per
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/verdict")
}

// BenchmarkPrivilegedVerdictFloor is what BPF_PROG_TEST_RUN itself costs under
// BenchmarkPrivilegedVerdict's harness: a tc program that only returns TC_ACT_OK,
// run on the same packet, as one run of b.N kernel repetitions (repeat:
// the harness of deny and ct-hit) and as b.N runs of one (single: the
// harness of allow-new). A verdict's own cost is its time minus the floor
// of its harness. ct-insert is the floor of a new connection: a program
// that only inserts a conntrack entry; l4-csum-twice that of translating a
// packet's address and port: two bpf_l4_csum_replace calls.
func BenchmarkPrivilegedVerdictFloor(b *testing.B) {
	testenv.Privileged(b)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, actOK), asm.Return()},
	})
	if err != nil {
		b.Fatalf("load the empty program: %v", err)
	}
	defer prog.Close()
	pkt := frame(packet{src: benchAddr(benchIdentities - 1).String(), dst: podV4, proto: policyapi.ProtoTCP, sport: 1, dport: 81})
	b.Run("repeat", func(b *testing.B) { benchRepeat(b, prog, pkt, actOK) })
	b.Run("single", func(b *testing.B) { benchSingle(b, prog, [][]byte{pkt}, actOK, nil) })
	b.Run("ct-insert", func(b *testing.B) {
		insert := ctInsertProgram(b)
		benchRepeat(b, insert, pkt, actOK)
	})
	b.Run("l4-csum-twice", func(b *testing.B) {
		benchRepeat(b, l4CsumProgram(b), pkt, actOK)
	})
}

// l4CsumProgram returns a tc program that calls bpf_l4_csum_replace twice
// on the TCP checksum of an IPv4 frame, as a translation with a new
// address and a new port does (the pseudo header, then the port), with
// nothing to change: the floor of what translating an established
// connection's packet costs beyond the flow cache hit.
func l4CsumProgram(b *testing.B) *ebpf.Program {
	const tcpCsumOff = 14 + 20 + 16
	call := func(flags int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, tcpCsumOff),
			asm.Mov.Imm(asm.R3, 0),
			asm.Mov.Imm(asm.R4, 0),
			asm.Mov.Imm(asm.R5, flags),
			asm.FnL4CsumReplace.Call(),
		}
	}
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	insns = append(insns, call(0x10 /* BPF_F_PSEUDO_HDR, a diff */)...)
	insns = append(insns, call(2 /* a 2-byte field */)...)
	insns = append(insns, asm.Mov.Imm(asm.R0, actOK), asm.Return())
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL", Instructions: insns})
	if err != nil {
		b.Fatalf("load the checksum program: %v", err)
	}
	b.Cleanup(func() { prog.Close() })
	return prog
}

// ctInsertProgram returns a tc program that inserts one new entry into a
// map made like lockstep_ct (an LRU hash of 131072 ct_key → ct_entry,
// not pinned) on every run, its key taken from bpf_ktime_get_ns: the
// conntrack insert allow-new pays, alone, under the repeat harness.
func ctInsertProgram(b *testing.B) *ebpf.Program {
	spec, err := loadEndpoint()
	if err != nil {
		b.Fatal(err)
	}
	ms := spec.Maps[bpfmaps.CTMap].Copy()
	ms.Name, ms.Pinning = "ct_insert_bench", ebpf.PinNone
	m, err := ebpf.NewMap(ms)
	if err != nil {
		b.Fatalf("create the conntrack-like map: %v", err)
	}
	b.Cleanup(func() { m.Close() })
	// The key at fp-48 (ct_key is 44 bytes), the value at fp-64.
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, -64, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -56, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -48, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -40, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -24, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, -40, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -48),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -64),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
		asm.Mov.Imm(asm.R0, actOK),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL", Instructions: insns})
	if err != nil {
		b.Fatalf("load the insert program: %v", err)
	}
	b.Cleanup(func() { prog.Close() })
	return prog
}

// benchRepeat runs pkt b.N times inside the kernel and reports the
// kernel's per-run time.
func benchRepeat(b *testing.B, prog *ebpf.Program, pkt []byte, want uint32) {
	ret, per, err := benchRun(prog, pkt, b.N, b.ResetTimer)
	if err != nil {
		b.Fatalf("benchmark: %v", err)
	}
	if ret != want {
		b.Fatalf("verdict %s, want %s", actName(ret), actName(want))
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/verdict")
}

// BenchmarkPrivilegedApplyRuleChange measures Apply of a one-rule policy change on
// a node with 10k remote identities and 1k rules, alternating between two
// states: the second shares the first's Addrs and CIDRs, as successive
// results of policy.Incremental do when no address or ipBlock changed.
// Each Apply starts once a grace period has passed since the previous
// flip (not timed), as edits apart in time do.
func BenchmarkPrivilegedApplyRuleChange(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	states := [2]*policy.Desired{benchDesired(1000), nil}
	s1 := *states[0]
	ep := *s1.Endpoints[podIf]
	ep.Rules = maps.Clone(ep.Rules)
	ep.Rules[policy.RuleKey{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}] = ports(53, 53)
	s1.Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
	states[1] = &s1
	mustApply(b, d, states[0])
	mustApply(b, d, states[1])
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		d.waitQuiet(b)
		b.StartTimer()
		mustApply(b, d, states[i%2])
	}
}

// BenchmarkPrivilegedApplyPolicyEdit is the edit tools/policybench times, at the
// datapath: 20 endpoints of ~1.2k rules each over 10k identities; edit i
// changes the port ranges of 140 rules of endpoint i%20 and hands every
// other endpoint, Addrs and CIDRs over as the same objects.
//   - settled: edits apart in time, as an agent sees them: the settler has
//     brought the idle parity up to date before the next edit, which
//     writes only its own change.
//   - back-to-back: the next edit comes right after the previous one: it
//     waits for the rest of the grace period that follows the previous
//     flip, and also brings the previous edit's endpoint up to date in the
//     idle parity.
func BenchmarkPrivilegedApplyPolicyEdit(b *testing.B) {
	testenv.Privileged(b)
	for _, settled := range []bool{true, false} {
		name := "back-to-back"
		if settled {
			name = "settled"
		}
		b.Run(name, func(b *testing.B) { benchPolicyEdits(b, settled) })
	}
}

func benchPolicyEdits(b *testing.B, settled bool) {
	const endpoints, rulesPer, changed = 20, 1200, 140
	d := newTestDatapath(b)
	base := benchDesired(0)
	base.Endpoints = make(map[string]*policy.EndpointPolicy, endpoints)
	for k := range endpoints {
		name := fmt.Sprintf("lsbench%d", k)
		d.fakeAttach(name, 1000+k)
		base.Endpoints[name] = &policy.EndpointPolicy{IngressIsolated: true, EgressIsolated: true, Rules: editRules(k, rulesPer, changed, 0)}
	}
	mustApply(b, d, base)
	mustApply(b, d, base)
	cur := base
	var entries int
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		k := i % endpoints
		next := *cur
		next.Endpoints = maps.Clone(cur.Endpoints)
		ep := *cur.Endpoints[fmt.Sprintf("lsbench%d", k)]
		ep.Rules = editRules(k, rulesPer, changed, i+1)
		next.Endpoints[fmt.Sprintf("lsbench%d", k)] = &ep
		cur = &next
		if settled {
			d.waitSettled(b)
		}
		b.StartTimer()
		mustApply(b, d, cur)
		entries += d.stats.entries
	}
	b.ReportMetric(float64(entries)/float64(b.N), "entries/op")
}

// editRules is endpoint k's rules at version v: n ingress rules from
// distinct identities, the first changed of which allow a port range that
// ends at a port depending on v.
func editRules(k, n, changed, v int) map[policy.RuleKey][]policy.PortRange {
	rules := make(map[policy.RuleKey][]policy.PortRange, n)
	for i := range n {
		id := policyapi.FirstPodIdentity + policyapi.Peer((k*311+i)%benchIdentities)
		r := ports(80, 80)
		if i < changed {
			r = ports(80, 80, 9000, uint16(9100+v%500))
		}
		rules[policy.RuleKey{Peer: id, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = r
	}
	return rules
}

// BenchmarkPrivilegedApplyNoChange is Apply of the state already applied, object for
// object (what an incremental compiler hands over when a change does not
// concern the node's endpoints): the floor of Apply with 10k addresses,
// once a grace period has passed since the previous flip.
func BenchmarkPrivilegedApplyNoChange(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	want := benchDesired(1000)
	mustApply(b, d, want)
	mustApply(b, d, want)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		d.waitQuiet(b)
		b.StartTimer()
		mustApply(b, d, want)
	}
}

// BenchmarkPrivilegedApplyNewRules is Apply of an endpoint's rules that neither
// parity holds (every policy edit that reaches an endpoint): a new inner
// policy map, and the update of the outer map that points at it, which the
// kernel follows with a synchronize_rcu for map-in-map types.
func BenchmarkPrivilegedApplyNewRules(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	base := benchDesired(1000)
	mustApply(b, d, base)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		d.waitQuiet(b)
		ep := *base.Endpoints[podIf]
		ep.Rules = maps.Clone(ep.Rules)
		ep.Rules[policy.RuleKey{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}] = ports(uint16(i%60000+1), uint16(i%60000+1))
		want := *base
		want.Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
		b.StartTimer()
		mustApply(b, d, &want)
	}
}

// BenchmarkPrivilegedApplyEndpointArrival is the Apply a pod ADD causes: one new
// endpoint without rules joins 1000 addresses' worth of state, after a
// grace period has passed since the last flip (the departure before it,
// not timed, is followed by a wait for the settler).
func BenchmarkPrivilegedApplyEndpointArrival(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("arrival", loIfindex+1)
	base := benchDesired(1000)
	mustApply(b, d, base)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		want := *base
		want.Endpoints = maps.Clone(base.Endpoints)
		want.Endpoints["arrival"] = &policy.EndpointPolicy{IPv4: netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})}
		d.waitQuiet(b)
		b.StartTimer()
		mustApply(b, d, &want)
		b.StopTimer()
		d.waitQuiet(b)
		mustApply(b, d, base)
		b.StartTimer()
	}
}

// progTestRunAttr is the part of union bpf_attr BPF_PROG_TEST_RUN reads.
type progTestRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize, _                uint32
}

// benchRun is ebpf.Program.Benchmark for a packet the node forwarded: it
// runs pkt repeat times with the skbContext of runOptions, which
// Benchmark cannot pass (to_pod would see the node's own packet and
// allow it without policy), and returns the last verdict and the
// kernel's mean time per run. An interrupted run starts over, after
// reset.
func benchRun(prog *ebpf.Program, pkt []byte, repeat int, reset func()) (uint32, time.Duration, error) {
	ctx, err := binary.Append(nil, binary.NativeEndian, runOptions(nil, false).Context)
	if err != nil {
		return 0, 0, err
	}
	attr := progTestRunAttr{
		progFD: uint32(prog.FD()), dataSizeIn: uint32(len(pkt)), dataIn: uint64(uintptr(unsafe.Pointer(&pkt[0]))),
		repeat: uint32(repeat), ctxSizeIn: uint32(len(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx[0]))),
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		runtime.KeepAlive(pkt)
		runtime.KeepAlive(ctx)
		switch {
		case errno == unix.EINTR:
			if reset != nil {
				reset()
			}
		case errno != 0:
			return 0, 0, fmt.Errorf("test run %s: %w", prog, errno)
		default:
			return attr.retval, time.Duration(attr.duration), nil
		}
	}
}
