//go:build linux

package datapath

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/internal/testenv"
)

const benchIdentities = 10000

// benchDesired is a node with benchIdentities remote pods (one identity
// each, 10.128.0.0/16 and fd00:128::/64) and an endpoint whose ingress
// allows TCP 80 from the first nrules identities.
func benchDesired(nrules int) *policy.Desired {
	d := &policy.Desired{
		Addrs: make(map[netip.Addr]policy.AddrEntry, 2*benchIdentities),
		CIDRs: map[netip.Prefix]policy.Peer{
			prefix("0.0.0.0/0"):  policy.NoCIDRClass,
			prefix("::/0"):       policy.NoCIDRClass,
			prefix("10.0.0.0/8"): policy.CIDRClassBit | 1,
		},
	}
	rules := make(map[policy.RuleKey][]policy.PortRange, nrules)
	for i := range benchIdentities {
		id := policy.FirstPodIdentity + policy.Peer(i)
		d.Addrs[benchAddr(i)] = policy.AddrEntry{Identity: id, CIDRClass: policy.NoCIDRClass}
		if i < nrules {
			rules[policy.RuleKey{Peer: id, Dir: policy.Ingress, Proto: policy.ProtoTCP}] = ports(80, 80, 8000, 8100)
		}
	}
	d.Addrs[addr(podV4)] = policy.AddrEntry{Identity: 50000, CIDRClass: policy.NoCIDRClass}
	d.Endpoints = map[string]*policy.EndpointPolicy{podIf: {
		IPv4: addr(podV4), IngressIsolated: true, EgressIsolated: true, Rules: rules,
	}}
	return d
}

func benchAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 128, byte(i >> 8), byte(i)})
}

// BenchmarkVerdict measures the in-kernel cost of one verdict of to_pod
// (BPF_PROG_TEST_RUN's own per-run time, not the syscall), with 10k
// remote identities and 100, 1k or 10k rules on the endpoint:
//   - deny: a new connection no rule allows (ipcache, three rule lookups)
//   - allow-new: a new connection a rule allows, creating its CT entry
//   - ct-hit: a packet of an established connection
func BenchmarkVerdict(b *testing.B) {
	testenv.Privileged(b)
	for _, nrules := range []int{100, 1000, 10000} {
		d := newTestDatapath(b)
		d.fakeAttach(podIf, loIfindex)
		mustApply(b, d, benchDesired(nrules))
		into := func(from int, sport uint16) []byte {
			return frame(packet{src: benchAddr(from).String(), dst: podV4, proto: policy.ProtoTCP, sport: sport, dport: 80})
		}

		b.Run(fmt.Sprintf("rules=%d/deny", nrules), func(b *testing.B) {
			// The last identity has no rule (nrules < benchIdentities
			// except at 10k, where port 81 misses every range).
			pkt := frame(packet{src: benchAddr(benchIdentities - 1).String(), dst: podV4, proto: policy.ProtoTCP, sport: 1, dport: 81})
			benchRepeat(b, d.toPod, pkt, actShot)
		})
		b.Run(fmt.Sprintf("rules=%d/allow-new", nrules), func(b *testing.B) {
			// Every run is a new connection: a different allowed peer and
			// source port, so it misses CT and creates an entry.
			frames := make([][]byte, 4096)
			for i := range frames {
				frames[i] = into(i%nrules, uint16(1024+i))
			}
			d.flushCT(b)
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				if i%len(frames) == 0 && i > 0 {
					b.StopTimer()
					d.flushCT(b)
					b.StartTimer()
				}
				ret, per, err := d.toPod.Benchmark(frames[i%len(frames)], 1, nil)
				if err != nil || ret != actOK {
					b.Fatalf("run: %v, %s", err, actName(ret))
				}
				total += per
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/verdict")
		})
		b.Run(fmt.Sprintf("rules=%d/ct-hit", nrules), func(b *testing.B) {
			pkt := into(0, 999)
			d.flushCT(b)
			if ret := runRaw(b, d.toPod, pkt); ret != actOK {
				b.Fatalf("first packet: %s", actName(ret))
			}
			benchRepeat(b, d.toPod, pkt, actOK)
		})
	}
}

// benchRepeat runs pkt b.N times inside the kernel and reports the
// kernel's per-run time.
func benchRepeat(b *testing.B, prog *ebpf.Program, pkt []byte, want uint32) {
	ret, per, err := prog.Benchmark(pkt, b.N, b.ResetTimer)
	if err != nil {
		b.Fatalf("benchmark: %v", err)
	}
	if ret != want {
		b.Fatalf("verdict %s, want %s", actName(ret), actName(want))
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/verdict")
}

// BenchmarkApplyRuleChange measures Apply of a one-rule policy change on
// a node with 10k remote identities and 1k rules: the "policy change →
// maps applied" latency.
func BenchmarkApplyRuleChange(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	states := [2]*policy.Desired{benchDesired(1000), benchDesired(1000)}
	ep := *states[1].Endpoints[podIf]
	ep.Rules = maps.Clone(ep.Rules)
	ep.Rules[policy.RuleKey{Peer: policy.PeerWorld, Dir: policy.Ingress, Proto: policy.ProtoUDP}] = ports(53, 53)
	states[1].Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
	mustApply(b, d, states[0])
	mustApply(b, d, states[1])
	b.ResetTimer()
	for i := range b.N {
		mustApply(b, d, states[i%2])
	}
}
