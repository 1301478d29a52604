//go:build linux

package datapath

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// svcBenchDesired is benchDesired's node (10k remote identities) with the
// endpoint's egress allowing the first 100 remote pods on TCP 8080, and
// three frontends: 10.96.0.1:80 with one backend (the first remote pod,
// on 8080), 10.96.0.2:8080 with the same backend (the port stays), and
// 10.96.0.100:80 with the first 100.
func svcBenchDesired() *policy.Desired {
	d := benchDesired(100)
	rules := d.Endpoints[podIf].Rules
	one := &policy.ServiceEntry{Service: "bench/one"}
	hundred := &policy.ServiceEntry{Service: "bench/hundred"}
	for i := range 100 {
		id := policyapi.FirstPodIdentity + policyapi.Peer(i)
		rules[policy.RuleKey{Peer: id, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(8080, 8080)
		b := policy.ServiceBackend{Addr: benchAddr(i), Port: 8080}
		hundred.Backends = append(hundred.Backends, b)
		if i == 0 {
			one.Backends = append(one.Backends, b)
		}
	}
	d.Services = map[policy.ServiceFrontend]*policy.ServiceEntry{
		frontend("10.96.0.1", policyapi.ProtoTCP, 80):   one,
		frontend("10.96.0.2", policyapi.ProtoTCP, 8080): one,
		frontend("10.96.0.100", policyapi.ProtoTCP, 80): hundred,
	}
	return d
}

// BenchmarkPrivilegedServiceVerdict measures what Service translation costs per
// packet, in the kernel (BPF_PROG_TEST_RUN's per-run time):
//   - established: from_pod, a packet of an established connection, to a
//     pod (untranslated) and through a frontend (translated: flow cache
//     hit, then the destination rewritten to the backend; same-port: the
//     Service port is the backend's, only the address changes);
//   - reply: to_pod, the backend's reply (translated: the source
//     rewritten to the frontend);
//   - new: a new connection to a pod (untranslated) and through a
//     frontend with 1 and with 100 backends (backend picked, judged, two
//     entries made, rewritten).
//
// The kernel's repeat runs the program again on the skb the previous run
// left, which a translated packet no longer matches: every run here is a
// BPF_PROG_TEST_RUN of its own on the original frame (the /single harness
// of BenchmarkPrivilegedVerdictFloor). The cases of a group run in turn, run by run,
// in an order that rotates (the first run of a round finds the CPU
// colder), so that they share the machine's load, and each reports the
// median of its runs (p50-ns: a run that lost its CPU does not count)
// beside the mean; "added" is the median, over rounds, of a case's time
// minus the untranslated case's in the same round.
func BenchmarkPrivilegedServiceVerdict(b *testing.B) {
	testenv.Privileged(b)
	d := newTestDatapath(b)
	d.fakeAttach(podIf, loIfindex)
	mustApply(b, d, svcBenchDesired())
	backend := benchAddr(0).String()
	out := func(dst string, dport, sport uint16, flags uint8) []byte {
		return csumFrame(packet{src: podV4, dst: dst, proto: policyapi.ProtoTCP, sport: sport, dport: dport, tcpFlags: flags})
	}
	reply := func(sport uint16) []byte {
		return csumFrame(packet{src: backend, dst: podV4, proto: policyapi.ProtoTCP, sport: 8080, dport: sport, tcpFlags: tcpACK})
	}
	open := func(b *testing.B, frames ...[]byte) {
		for _, f := range frames {
			if ret := runRaw(b, d.fromPod, f); ret != actOK {
				b.Fatalf("opening packet: %s", actName(ret))
			}
		}
	}
	b.Run("established", func(b *testing.B) {
		d.flushCT(b)
		open(b, out(backend, 8080, 1000, tcpSYN), out("10.96.0.1", 80, 1001, tcpSYN), out("10.96.0.2", 8080, 1004, tcpSYN))
		benchTurns(b, d, []benchCase{
			{"untranslated", d.fromPod, [][]byte{out(backend, 8080, 1000, tcpACK)}},
			{"translated", d.fromPod, [][]byte{out("10.96.0.1", 80, 1001, tcpACK)}},
			{"same-port", d.fromPod, [][]byte{out("10.96.0.2", 8080, 1004, tcpACK)}},
		}, nil)
	})
	b.Run("reply", func(b *testing.B) {
		d.flushCT(b)
		open(b, out(backend, 8080, 1002, tcpSYN), out("10.96.0.1", 80, 1003, tcpSYN))
		benchTurns(b, d, []benchCase{
			{"untranslated", d.toPod, [][]byte{reply(1002)}},
			{"translated", d.toPod, [][]byte{reply(1003)}},
		}, nil)
	})
	b.Run("new", func(b *testing.B) {
		const n = 2048
		var untranslated, one, hundred [][]byte
		for i := range n {
			untranslated = append(untranslated, out(benchAddr(i%100).String(), 8080, uint16(1024+i), tcpSYN))
			one = append(one, out("10.96.0.1", 80, uint16(1024+i), tcpSYN))
			hundred = append(hundred, out("10.96.0.100", 80, uint16(1024+n+i), tcpSYN))
		}
		d.flushCT(b)
		benchTurns(b, d, []benchCase{
			{"untranslated", d.fromPod, untranslated},
			{"backends=1", d.fromPod, one},
			{"backends=100", d.fromPod, hundred},
		}, func() { d.flushCT(b) })
	})
}

// benchCase is one case of benchTurns: frames run in turn through prog.
type benchCase struct {
	name   string
	prog   *ebpfProgram
	frames [][]byte
}

// benchTurns runs the cases in turn, b.N rounds of one run each in a
// rotating order, and reports per case the mean and the median per-run
// time, and for each case after the first the median of its run's time
// minus the first case's in the same round ("added-ns" metrics). refill, when set, runs
// untimed each time the frames have all been used.
func benchTurns(b *testing.B, d *Datapath, cases []benchCase, refill func()) {
	times := make([][]time.Duration, len(cases))
	b.ResetTimer()
	for i := range b.N {
		if i%len(cases[0].frames) == 0 && i > 0 && refill != nil {
			b.StopTimer()
			refill()
			b.StartTimer()
		}
		// The first run of a round finds the CPU colder than the next:
		// the order rotates, so that no case always runs first.
		for k := range cases {
			c := (i + k) % len(cases)
			bc := cases[c]
			ret, per, err := benchRun(bc.prog, bc.frames[i%len(bc.frames)], 1, nil)
			if err != nil || ret != actOK {
				b.Fatalf("%s: run: %v, %s", bc.name, err, actName(ret))
			}
			times[c] = append(times[c], per)
		}
	}
	b.StopTimer()
	for c, bc := range cases {
		var total time.Duration
		for _, t := range times[c] {
			total += t
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), bc.name+"-ns")
		b.ReportMetric(float64(median(times[c]).Nanoseconds()), bc.name+"-p50-ns")
		if c > 0 {
			added := make([]time.Duration, b.N)
			for i := range added {
				added[i] = times[c][i] - times[0][i]
			}
			b.ReportMetric(float64(median(added).Nanoseconds()), bc.name+"-added-p50-ns")
		}
	}
}

func median(ts []time.Duration) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)/2]
}

// The benchmark's packets do what its cases say: through the frontend
// translated to the backend, to the pod untranslated, and the 100-backend
// frontend spread over its backends.
func TestPrivilegedServiceBenchPackets(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcBenchDesired())
	for _, tc := range []struct {
		dst  string
		want netip.AddrPort
	}{
		{"10.96.0.1", netip.AddrPortFrom(benchAddr(0), 8080)},
		{benchAddr(0).String(), netip.AddrPortFrom(benchAddr(0), 8080)},
	} {
		dport := uint16(80)
		if tc.dst == benchAddr(0).String() {
			dport = 8080
		}
		ret, raw := runOut(t, d.fromPod, csumFrame(packet{src: podV4, dst: tc.dst, proto: policyapi.ProtoTCP, sport: 7, dport: dport}))
		w := mustWire(t, "SYN", raw)
		if got := netip.AddrPortFrom(w.dst, w.dport); ret != actOK || got != tc.want {
			t.Errorf("to %s: %s to %s, want OK to %s", tc.dst, actName(ret), got, tc.want)
		}
	}
	seen := map[netip.Addr]bool{}
	for i := range 300 {
		_, raw := runOut(t, d.fromPod, csumFrame(packet{src: podV4, dst: "10.96.0.100", proto: policyapi.ProtoTCP, sport: uint16(2000 + i), dport: 80}))
		seen[mustWire(t, "SYN", raw).dst] = true
	}
	if len(seen) < 50 {
		t.Errorf("300 connections to 100 backends reached %d of them", len(seen))
	}
}
