//go:build linux

package datapath

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// ctKeyOf is the conntrack key of p at ifindex, its ends ordered as
// ct_fill_key orders them (bpf/lib/ct.h).
func ctKeyOf(ifindex uint32, p packet) bpfmaps.CTKey {
	s, d := bpfmaps.AddrFrom(addr(p.src)), bpfmaps.AddrFrom(addr(p.dst))
	less := func(a, b bpfmaps.Addr) (bool, bool) { // a < b, a == b, as two host-order u64
		for _, off := range []int{0, 8} {
			x, y := binary.LittleEndian.Uint64(a[off:]), binary.LittleEndian.Uint64(b[off:])
			if x != y {
				return x < y, false
			}
		}
		return false, true
	}
	lt, eq := less(d, s)
	swap := lt || (eq && p.sport > p.dport)
	k := bpfmaps.CTKey{Ifindex: ifindex, Proto: p.proto, Port: [2]uint16{p.sport, p.dport}, Addr: [2]bpfmaps.Addr{s, d}}
	if swap {
		k.Port = [2]uint16{p.dport, p.sport}
		k.Addr = [2]bpfmaps.Addr{d, s}
	}
	return k
}

// ctDeadline returns the deadline and flags of the entry of k in table
// (lockstep_ct or lockstep_svc_ct), failing the test when there is none.
func ctDeadline(tb testing.TB, table *ebpf.Map, k bpfmaps.CTKey) (time.Duration, uint32) {
	tb.Helper()
	var v bpfmaps.SvcCTEntry // ct_entry is its head
	raw, err := table.LookupBytes(k)
	if err != nil || raw == nil {
		tb.Fatalf("no entry of %+v: %v", k, err)
	}
	v.Expires = binary.LittleEndian.Uint64(raw[0:8])
	v.Flags = binary.LittleEndian.Uint32(raw[8:12])
	return time.Duration(int64(v.Expires) - int64(coarseNow(tb))), v.Flags
}

// step is one packet of a scenario and the action it must get.
type step struct {
	what string
	prog *ebpf.Program
	pkt  packet
	want uint32
}

func runSteps(t *testing.T, steps ...step) {
	t.Helper()
	for _, s := range steps {
		if got := runRaw(t, s.prog, csumFrame(s.pkt)); got != s.want {
			t.Fatalf("%s: got %s, want %s", s.what, actName(got), actName(s.want))
		}
	}
}

// with returns p with other TCP flags.
func with(p packet, flags uint8) packet {
	p.tcpFlags = flags
	return p
}

// A FIN or a RST ends a connection's entry as netfilter ends it: a RST
// leaves it 10 s, a FIN 2 min, and later ACKs never move it back out to
// the 2 h of an established connection. The packet that closes may come
// from this CPU's flow cache's connection: it still reaches the table.
func TestPrivilegedConntrackCloseTimeouts(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(true, true))
	onOneCPU(t)
	req, reply := flowRequest, flowReply
	key := ctKeyOf(loIfindex, req)
	for _, tc := range []struct {
		name    string
		closing step
		flag    uint32
		max     time.Duration
	}{
		{"FIN from the pod", step{"FIN", d.fromPod, with(req, tcpFIN|tcpACK), actOK}, bpfmaps.CTFin, 2 * time.Minute},
		{"FIN from the peer", step{"FIN", d.toPod, with(reply, tcpFIN|tcpACK), actOK}, bpfmaps.CTFin, 2 * time.Minute},
		{"RST from the pod", step{"RST", d.fromPod, with(req, tcpRST), actOK}, bpfmaps.CTRst, 10 * time.Second},
		{"RST from the peer", step{"RST|ACK", d.toPod, with(reply, tcpRST|tcpACK), actOK}, bpfmaps.CTRst, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			runSteps(t,
				step{"SYN", d.fromPod, with(req, tcpSYN), actOK},
				step{"SYN-ACK", d.toPod, with(reply, tcpSYN|tcpACK), actOK},
				step{"ACK", d.fromPod, with(req, tcpACK), actOK},
				step{"ACK from the flow cache", d.fromPod, with(req, tcpACK), actOK},
			)
			if left, _ := ctDeadline(t, d.ct, key); left < time.Hour {
				t.Fatalf("established: entry expires in %v, want about 2h", left)
			}
			runSteps(t, tc.closing)
			left, flags := ctDeadline(t, d.ct, key)
			if flags&tc.flag == 0 || left > tc.max {
				t.Errorf("after the %s: flags %#x, expires in %v; want flag %#x, at most %v", tc.closing.what, flags, left, tc.flag, tc.max)
			}
			// Later packets keep a closing connection alive only as
			// long again, in both directions, table and cache alike.
			runSteps(t,
				step{"ACK", d.fromPod, with(req, tcpACK), actOK},
				step{"reply ACK", d.toPod, with(reply, tcpACK), actOK},
			)
			if err := d.bumpCTEpoch(); err != nil {
				t.Fatal(err)
			}
			runSteps(t, step{"ACK from the table", d.fromPod, with(req, tcpACK), actOK})
			if left, flags := ctDeadline(t, d.ct, key); flags&tc.flag == 0 || left > tc.max {
				t.Errorf("ACKs after the %s: flags %#x, expires in %v; want flag %#x, at most %v", tc.closing.what, flags, left, tc.flag, tc.max)
			}
		})
	}

	// A RST after a FIN shortens the entry further; a FIN after a RST
	// does not lengthen it.
	d.flushCT(t)
	runSteps(t,
		step{"SYN", d.fromPod, with(req, tcpSYN), actOK},
		step{"SYN-ACK", d.toPod, with(reply, tcpSYN|tcpACK), actOK},
		step{"FIN", d.fromPod, with(req, tcpFIN|tcpACK), actOK},
		step{"RST", d.toPod, with(reply, tcpRST), actOK},
		step{"FIN", d.toPod, with(reply, tcpFIN|tcpACK), actOK},
	)
	if left, flags := ctDeadline(t, d.ct, key); flags&(bpfmaps.CTFin|bpfmaps.CTRst) != bpfmaps.CTFin|bpfmaps.CTRst || left > 10*time.Second {
		t.Errorf("FIN, RST, FIN: flags %#x, expires in %v; want FIN and RST marks, at most 10s", flags, left)
	}
}

// A new connection that reuses the four-tuple of a closed one is judged
// by policy again: a pure SYN over a closing entry is not tracked, even
// when every CPU's flow cache still holds a copy of the entry from before
// the close. An open connection's packets are not judged again.
func TestPrivilegedConntrackSYNAfterCloseJudgedAgain(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	allow := scenario(true, true)
	deny := scenario(true, true)
	delete(deny.Endpoints[podIf].Rules, policy.RuleKey{Peer: idWeb, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP})
	req, reply := flowRequest, flowReply
	key := ctKeyOf(loIfindex, req)
	for _, tc := range []struct {
		name  string
		close *step
		cache bool // every CPU's cache holds a live copy from before the close
		want  uint32
	}{
		{"no close: the SYN is a retransmission", nil, false, actOK},
		{"after a FIN", &step{"FIN", d.fromPod, with(req, tcpFIN|tcpACK), actOK}, false, actShot},
		{"after a RST", &step{"RST", d.toPod, with(reply, tcpRST), actOK}, false, actShot},
		{"after a RST, cached copies", &step{"RST", d.toPod, with(reply, tcpRST), actOK}, true, actShot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustApply(t, d, allow)
			d.flushCT(t)
			runSteps(t,
				step{"SYN", d.fromPod, with(req, tcpSYN), actOK},
				step{"SYN-ACK", d.toPod, with(reply, tcpSYN|tcpACK), actOK},
				step{"ACK", d.fromPod, with(req, tcpACK), actOK},
			)
			if tc.close != nil {
				runSteps(t, *tc.close)
			}
			if tc.cache {
				d.fillCTCache(t, bpfmaps.CTCacheSlot{
					Key: key, Epoch: d.ctEpochNow(t), Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0),
					ValidUntil: coarseNow(t) + uint64(10*time.Second),
				})
			}
			mustApply(t, d, deny)
			before := counter(t, d, bpfmaps.ReasonPolicyEgress)
			if got := run(t, d.fromPod, with(req, tcpSYN)); got != tc.want {
				t.Fatalf("SYN on the four-tuple under a policy that now denies it: got %s, want %s", actName(got), actName(tc.want))
			}
			if tc.want == actShot {
				if got := counter(t, d, bpfmaps.ReasonPolicyEgress) - before; got != 1 {
					t.Errorf("policy-egress grew by %d, want 1", got)
				}
				// Allowed again, the new connection gets an entry of its own.
				mustApply(t, d, allow)
				runSteps(t, step{"SYN", d.fromPod, with(req, tcpSYN), actOK})
				if left, flags := ctDeadline(t, d.ct, key); flags&(bpfmaps.CTFin|bpfmaps.CTRst) != 0 || left < 30*time.Second {
					t.Errorf("the new connection's entry: flags %#x, expires in %v; want no close mark, a fresh deadline", flags, left)
				}
			}
		})
	}
}

// Through a Service, a new connection that reuses a closed one's
// four-tuple is translated anew, to a backend of the Service as it is
// now; a SYN retransmitted while the connection opens keeps its backend.
// The close of either end marks both entries of the translated
// connection.
func TestPrivilegedServiceSYNAfterCloseTranslatedAnew(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	withBackend := func(b string) *policy.Desired {
		s := svcScenario()
		s.Services[frontend(svcWeb4, policyapi.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(8080, b)}
		return s
	}
	const first, second = "10.0.0.2", "10.0.0.5"
	req := packet{src: podV4, dst: svcWeb4, proto: policyapi.ProtoTCP, sport: 42000, dport: 80}
	replyFrom := func(b string) packet {
		return packet{src: b, dst: podV4, proto: policyapi.ProtoTCP, sport: 8080, dport: 42000}
	}
	translatedTo := func(t *testing.T, what string, p packet) string {
		t.Helper()
		ret, out := runOut(t, d.fromPod, csumFrame(p))
		if ret != actOK {
			t.Fatalf("%s: got %s, want OK", what, actName(ret))
		}
		w := mustWire(t, what, out)
		return w.dst.String()
	}
	for _, tc := range []struct {
		name  string
		close func(t *testing.T)
		want  string
	}{
		{"SYN retransmitted: same backend", nil, first},
		{"after the client's FIN", func(t *testing.T) { translatedTo(t, "FIN", with(req, tcpFIN|tcpACK)) }, second},
		{"after the backend's RST", func(t *testing.T) {
			runSteps(t, step{"RST", d.toPod, with(replyFrom(first), tcpRST), actOK})
		}, second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withBackend(first)
			s.Addrs[addr(second)] = policy.AddrEntry{Identity: idWeb, CIDRClass: policyapi.NoCIDRClass}
			mustApply(t, d, s)
			d.flushCT(t)
			if got := translatedTo(t, "SYN", with(req, tcpSYN)); got != first {
				t.Fatalf("SYN translated to %s, want %s", got, first)
			}
			if tc.close != nil {
				runSteps(t, step{"SYN-ACK", d.toPod, with(replyFrom(first), tcpSYN|tcpACK), actOK})
				translatedTo(t, "ACK", with(req, tcpACK))
				tc.close(t)
				for _, k := range []bpfmaps.CTKey{ctKeyOf(loIfindex, req), ctKeyOf(loIfindex, replyFrom(first))} {
					if _, flags := ctDeadline(t, d.svcCT, k); flags&(bpfmaps.CTFin|bpfmaps.CTRst) == 0 {
						t.Errorf("entry %+v: flags %#x, want it marked closing", k, flags)
					}
				}
			}
			s = withBackend(second)
			s.Addrs[addr(second)] = policy.AddrEntry{Identity: idWeb, CIDRClass: policyapi.NoCIDRClass}
			mustApply(t, d, s)
			if got := translatedTo(t, "the next SYN", with(req, tcpSYN)); got != tc.want {
				t.Fatalf("the next SYN translated to %s, want %s", got, tc.want)
			}
			// Its reply comes back from the frontend.
			ret, out := runOut(t, d.toPod, csumFrame(with(replyFrom(tc.want), tcpSYN|tcpACK)))
			if w := mustWire(t, "SYN-ACK", out); ret != actOK || w.src != addr(svcWeb4) || w.sport != 80 {
				t.Errorf("SYN-ACK from %s: %s from %s:%d, want OK from %s:80", tc.want, actName(ret), w.src, w.sport, svcWeb4)
			}
		})
	}
}

// After a translated connection closed, a connection straight to the
// backend on the same four-tuple is the pod's own: its replies are not
// translated the old connection's way. And the reverse: after a direct
// connection closed, one through the Service is translated.
func TestPrivilegedServiceFourTupleReuseAfterClose(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	const backend = "10.0.0.2"
	viaSvc := packet{src: podV4, dst: svcWeb4, proto: policyapi.ProtoTCP, sport: 43000, dport: 80}
	direct := packet{src: podV4, dst: backend, proto: policyapi.ProtoTCP, sport: 43000, dport: 8080}
	reply := packet{src: backend, dst: podV4, proto: policyapi.ProtoTCP, sport: 8080, dport: 43000}
	replySource := func(t *testing.T) string {
		t.Helper()
		ret, out := runOut(t, d.toPod, csumFrame(with(reply, tcpSYN|tcpACK)))
		if ret != actOK {
			t.Fatalf("SYN-ACK: got %s, want OK", actName(ret))
		}
		return mustWire(t, "SYN-ACK", out).src.String()
	}

	d.flushCT(t)
	runSteps(t, step{"SYN via the Service", d.fromPod, with(viaSvc, tcpSYN), actOK})
	if got := replySource(t); got != svcWeb4 {
		t.Fatalf("SYN-ACK via the Service from %s, want %s", got, svcWeb4)
	}
	runSteps(t,
		step{"FIN", d.fromPod, with(viaSvc, tcpFIN|tcpACK), actOK},
		step{"SYN straight to the backend", d.fromPod, with(direct, tcpSYN), actOK},
	)
	if got := replySource(t); got != backend {
		t.Errorf("after a translated connection closed, the direct connection's SYN-ACK comes from %s, want %s", got, backend)
	}

	runSteps(t,
		step{"RST", d.fromPod, with(direct, tcpRST), actOK},
		step{"SYN via the Service", d.fromPod, with(viaSvc, tcpSYN), actOK},
	)
	if got := replySource(t); got != svcWeb4 {
		t.Errorf("after a direct connection closed, the translated connection's SYN-ACK comes from %s, want %s", got, svcWeb4)
	}
}

// A pod that reaches itself through its Service and closes: both entries
// of the hairpin connection are marked closing, whichever side sends the
// FIN.
func TestPrivilegedServiceHairpinClose(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	s := svcScenario()
	tcp := policyapi.ProtoTCP
	s.Endpoints[podIf].Rules[policy.RuleKey{Peer: idPod, Dir: policyapi.Egress, Proto: tcp}] = ports(8080, 8080)
	s.Endpoints[podIf].Rules[policy.RuleKey{Peer: idPod, Dir: policyapi.Ingress, Proto: tcp}] = ports(8080, 8080)
	mustApply(t, d, s)
	syn := packet{src: podV4, dst: svcSelf4, proto: tcp, sport: 41000, dport: 80}
	// The backend side's packets, before translation: from the pod's 8080
	// to the frontend's address at the client's port.
	back := packet{src: podV4, dst: svcSelf4, proto: tcp, sport: 8080, dport: 41000}
	translated := packet{src: svcSelf4, dst: podV4, proto: tcp, sport: 41000, dport: 8080}
	for _, tc := range []struct {
		name string
		fin  packet
	}{{"client's FIN", with(syn, tcpFIN|tcpACK)}, {"backend's FIN", with(back, tcpFIN|tcpACK)}} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			for _, p := range []packet{with(syn, tcpSYN), with(back, tcpSYN|tcpACK), tc.fin} {
				if ret, _ := runOut(t, d.fromPod, csumFrame(p)); ret != actRedirect {
					t.Fatalf("%+v: got %s (%d), want it redirected back to the pod", p, actName(ret), ret)
				}
			}
			for _, k := range []bpfmaps.CTKey{ctKeyOf(loIfindex, syn), ctKeyOf(loIfindex, translated)} {
				if left, flags := ctDeadline(t, d.svcCT, k); flags&bpfmaps.CTFin == 0 || left > 2*time.Minute {
					t.Errorf("entry %+v: flags %#x, expires in %v; want a FIN mark, at most 2m", k, flags, left)
				}
			}
		})
	}
}
