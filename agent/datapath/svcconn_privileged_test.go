//go:build linux

package datapath

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// A pod that reaches itself through its Service: egress judged on itself
// as the backend, ingress judged with itself as the peer, the source
// translated to the frontend's address (its kernel would drop a packet
// from its own address), and the packets of both directions handed
// straight back to it.
func TestPrivilegedServiceHairpin(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	tcp := policyapi.ProtoTCP
	selfOut := policy.RuleKey{Peer: idPod, Dir: policyapi.Egress, Proto: tcp}
	selfIn := policy.RuleKey{Peer: idPod, Dir: policyapi.Ingress, Proto: tcp}
	withRules := func(keys ...policy.RuleKey) *policy.Desired {
		s := svcScenario()
		for _, k := range keys {
			s.Endpoints[podIf].Rules[k] = ports(8080, 8080)
		}
		return s
	}
	for _, fam := range []struct{ name, pod, svc string }{{"v4", podV4, svcSelf4}, {"v6", podV6, svcSelf6}} {
		t.Run(fam.name, func(t *testing.T) {
			syn := packet{src: fam.pod, dst: fam.svc, proto: tcp, sport: 41000, dport: 80, seq: 100}
			for _, tc := range []struct {
				name   string
				state  *policy.Desired
				reason bpfmaps.Reason
			}{
				{"no egress rule to itself", withRules(selfIn), bpfmaps.ReasonPolicyEgress},
				{"no ingress rule from itself", withRules(selfOut), bpfmaps.ReasonPolicyIngress},
			} {
				mustApply(t, d, tc.state)
				d.flushCT(t)
				before := counter(t, d, tc.reason)
				if ret, _ := runOut(t, d.fromPod, csumFrame(syn)); ret != actShot {
					t.Errorf("%s: got %s, want SHOT", tc.name, actName(ret))
				}
				if got := counter(t, d, tc.reason) - before; got != 1 {
					t.Errorf("%s: %s grew by %d, want 1", tc.name, tc.reason, got)
				}
			}

			mustApply(t, d, withRules(selfOut, selfIn))
			d.flushCT(t)
			raw := csumFrame(syn)
			ret, out := runOut(t, d.fromPod, raw)
			if ret != actRedirect {
				t.Fatalf("SYN: got %s (%d), want it redirected back to the pod", actName(ret), ret)
			}
			w := mustWire(t, "hairpinned SYN", out)
			checkAnswerHeaders(t, raw, w, fam.svc, fam.pod)
			if w.sport != 41000 || w.dport != 8080 || w.tcpFlags != tcpSYN {
				t.Errorf("hairpinned SYN %d → %d flags %#x, want 41000 → 8080 SYN", w.sport, w.dport, w.tcpFlags)
			}

			synAck := packet{src: fam.pod, dst: fam.svc, proto: tcp, sport: 8080, dport: 41000, tcpFlags: tcpSYN | tcpACK, seq: 900, ackSeq: 101}
			raw = csumFrame(synAck)
			ret, out = runOut(t, d.fromPod, raw)
			if ret != actRedirect {
				t.Fatalf("SYN-ACK: got %s (%d), want it redirected back to the pod", actName(ret), ret)
			}
			w = mustWire(t, "hairpinned SYN-ACK", out)
			checkAnswerHeaders(t, raw, w, fam.svc, fam.pod)
			if w.sport != 80 || w.dport != 41000 {
				t.Errorf("hairpinned SYN-ACK %d → %d, want 80 → 41000", w.sport, w.dport)
			}

			ack := syn
			ack.tcpFlags, ack.seq, ack.ackSeq = tcpACK, 101, 901
			ret, out = runOut(t, d.fromPod, csumFrame(ack))
			if w = mustWire(t, "hairpinned ACK", out); ret != actRedirect || w.src != addr(fam.svc) || w.dst != addr(fam.pod) || w.dport != 8080 {
				t.Errorf("ACK: %s, %s → %s:%d, want redirected, %s → %s:8080", actName(ret), w.src, w.dst, w.dport, fam.svc, fam.pod)
			}
		})
	}
}

// affinityScenario adds two frontends with the same four backends (all
// identity 300, TCP 8080): svcAffinity with sessionAffinity ClientIP
// (timeout 1 s), svcRandom without.
const (
	svcAffinity4 = "10.96.0.20"
	svcRandom4   = "10.96.0.21"
)

var affinityBackends = []string{"10.0.0.2", "10.0.0.5", "10.0.0.6", "10.0.0.7"}

func affinityScenario(bs []string) *policy.Desired {
	s := svcScenario()
	for _, a := range append([]string{"10.0.0.8"}, affinityBackends...) {
		s.Addrs[addr(a)] = policy.AddrEntry{Identity: idWeb, CIDRClass: policyapi.NoCIDRClass}
	}
	s.Services[frontend(svcAffinity4, policyapi.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/sticky", Backends: backends(8080, bs...), AffinityTimeout: time.Second}
	s.Services[frontend(svcRandom4, policyapi.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/random", Backends: backends(8080, bs...)}
	return s
}

// connectTo opens a new connection (a SYN from sport) to svc:80 and
// returns the backend from_pod translated it to.
func connectTo(t *testing.T, d *Datapath, svc string, sport uint16) netip.Addr {
	t.Helper()
	ret, out := runOut(t, d.fromPod, csumFrame(packet{src: podV4, dst: svc, proto: policyapi.ProtoTCP, sport: sport, dport: 80}))
	w := mustWire(t, "SYN", out)
	if ret != actOK || w.dport != 8080 {
		t.Fatalf("SYN from %d to %s: %s to %s:%d, want OK to a backend's 8080", sport, svc, actName(ret), w.dst, w.dport)
	}
	return w.dst
}

// sessionAffinity ClientIP: a client's new connections go to the backend
// of its last one while the affinity entry is younger than the timeout,
// and again to any backend after it; without affinity, new connections
// spread over the backends. A change to the other backends keeps the
// affinity; the backend leaving ends it.
func TestPrivilegedServiceAffinity(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, affinityScenario(affinityBackends))
	sport := uint16(20000)
	next := func() uint16 { sport++; return sport }

	seen := map[netip.Addr]bool{}
	for range 40 {
		seen[connectTo(t, d, svcRandom4, next())] = true
	}
	if len(seen) < 3 {
		t.Errorf("40 connections without affinity went to %d of 4 backends: %v", len(seen), seen)
	}

	first := connectTo(t, d, svcAffinity4, next())
	for i := range 20 {
		if got := connectTo(t, d, svcAffinity4, next()); got != first {
			t.Fatalf("connection %d within the timeout went to %s, want %s (affinity)", i, got, first)
		}
	}

	// Another backend replaced: the client keeps its backend.
	replaced := affinityScenario(replaceOne(affinityBackends, first.String(), "10.0.0.8"))
	mustApply(t, d, replaced)
	for i := range 10 {
		if got := connectTo(t, d, svcAffinity4, next()); got != first {
			t.Fatalf("connection %d after another backend changed went to %s, want %s (affinity)", i, got, first)
		}
	}

	// The timeout runs out: a new connection may go anywhere.
	released := false
	for range 10 {
		time.Sleep(1100 * time.Millisecond)
		if got := connectTo(t, d, svcAffinity4, next()); got != first {
			released = true
			break
		}
	}
	if !released {
		t.Errorf("every connection after the timeout (1 s) went to %s: affinity never released", first)
	}

	// The backend leaves: its clients go elsewhere at once.
	now := connectTo(t, d, svcAffinity4, next())
	var without []string
	for _, a := range replaceOne(affinityBackends, first.String(), "10.0.0.8") {
		if a != now.String() {
			without = append(without, a)
		}
	}
	mustApply(t, d, affinityScenario(without))
	if got := connectTo(t, d, svcAffinity4, next()); got == now {
		t.Errorf("connection after its affinity backend %s left went to it", now)
	}
}

// A client's affinity backend is chosen with the backend, before policy,
// as kube-proxy's nat table records it before the filter table judges the
// connection: once a connection went to a backend the client's egress
// denies, every new one within the timeout goes there too and is denied,
// rather than trying the others until one is allowed.
func TestPrivilegedServiceAffinityBeforePolicy(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	s := svcScenario()
	const svc = "10.96.0.22"
	// 10.0.0.2 (identity 300) the pod's egress allows on 8080, 10.0.0.3
	// (identity 301) it does not.
	s.Services[frontend(svc, policyapi.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/half", Backends: backends(8080, "10.0.0.2", "10.0.0.3"), AffinityTimeout: time.Minute}
	mustApply(t, d, s)
	d.flushCT(t)
	syn := func(sport uint16) uint32 {
		ret, _ := runOut(t, d.fromPod, csumFrame(packet{src: podV4, dst: svc, proto: policyapi.ProtoTCP, sport: sport, dport: 80}))
		return ret
	}
	aff, err := ebpf.LoadPinnedMap(filepath.Join(d.pinRoot, bpfmaps.AffinityMap), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer aff.Close()
	// Until a first connection goes to the denied backend: each try
	// starts without an affinity entry.
	sport := uint16(30000)
	for {
		var k bpfmaps.AffinityKey
		for aff.NextKey(nil, &k) == nil {
			if err := aff.Delete(k); err != nil {
				t.Fatal(err)
			}
		}
		if sport++; syn(sport) == actShot {
			break
		}
		if sport == 30064 {
			t.Fatalf("64 first connections all went to the allowed backend: the choice is not random")
		}
	}
	for i := range 16 {
		if ret := syn(sport + 1 + uint16(i)); ret != actShot {
			t.Fatalf("connection %d after one to the denied backend: %s, want SHOT (its affinity backend, denied)", i, actName(ret))
		}
	}
}

// replaceOne returns bs with the first element other than keep replaced
// by with.
func replaceOne(bs []string, keep, with string) []string {
	out := append([]string(nil), bs...)
	for i, a := range out {
		if a != keep {
			out[i] = with
			break
		}
	}
	return out
}

// A connection keeps its backend when the frontend's backends change or
// the frontend goes, as conntrack keeps it for kube-proxy: its packets
// and replies are translated as before, from the flow cache and from
// the table; new connections follow the new state.
func TestPrivilegedServiceConnectionKeepsBackend(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	base := affinityScenario(affinityBackends)
	webTCP := frontend(svcWeb4, policyapi.ProtoTCP, 80)
	mustApply(t, d, base)
	d.flushCT(t)
	syn := packet{src: podV4, dst: svcWeb4, proto: policyapi.ProtoTCP, sport: 41000, dport: 80}
	if ret, out := runOut(t, d.fromPod, csumFrame(syn)); ret != actOK || mustWire(t, "SYN", out).dst != addr("10.0.0.2") {
		t.Fatalf("SYN: %s, want OK to 10.0.0.2", actName(ret))
	}

	moved := *base
	moved.Services = cloneServices(base.Services)
	moved.Services[webTCP] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(8080, "10.0.0.5")}
	gone := *base
	gone.Services = cloneServices(base.Services)
	delete(gone.Services, webTCP)
	for i, step := range []struct {
		name    string
		state   *policy.Desired
		newConn uint32 // what a new connection gets
		newTo   string
	}{
		{"backends changed", &moved, actOK, "10.0.0.5"},
		{"frontend gone", &gone, actShot, ""},
	} {
		mustApply(t, d, step.state)
		for _, path := range []string{"flow cache", "table"} {
			if path == "table" {
				if err := d.bumpCTEpoch(); err != nil {
					t.Fatal(err)
				}
			}
			ack := syn
			ack.tcpFlags, ack.seq = tcpACK, 1
			ret, out := runOut(t, d.fromPod, csumFrame(ack))
			if w := mustWire(t, "ACK", out); ret != actOK || w.dst != addr("10.0.0.2") || w.dport != 8080 {
				t.Errorf("%s, %s: ACK %s to %s:%d, want OK to 10.0.0.2:8080", step.name, path, actName(ret), w.dst, w.dport)
			}
			reply := packet{src: "10.0.0.2", dst: podV4, proto: policyapi.ProtoTCP, sport: 8080, dport: 41000, tcpFlags: tcpACK}
			ret, out = runOut(t, d.toPod, csumFrame(reply))
			if w := mustWire(t, "reply", out); ret != actOK || w.src != addr(svcWeb4) || w.sport != 80 {
				t.Errorf("%s, %s: reply %s from %s:%d, want OK from %s:80", step.name, path, actName(ret), w.src, w.sport, svcWeb4)
			}
		}
		other := syn
		other.sport += uint16(1 + i)
		ret, out := runOut(t, d.fromPod, csumFrame(other))
		if ret != step.newConn {
			t.Errorf("%s: a new connection got %s, want %s", step.name, actName(ret), actName(step.newConn))
		} else if step.newTo != "" {
			if w := mustWire(t, "new SYN", out); w.dst != addr(step.newTo) {
				t.Errorf("%s: a new connection went to %s, want %s", step.name, w.dst, step.newTo)
			}
		}
	}
}

// A busy connection keeps its client's affinity entry fresh: the timeout
// runs from its last packet (to about a second), not from the connection's
// first, as policy.ServiceEntry documents.
func TestPrivilegedServiceAffinityFollowsTraffic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, affinityScenario(affinityBackends))
	d.flushCT(t)
	last := func() uint64 {
		es, err := bpfmaps.Dump(d.pinRoot, bpfmaps.AffinityMap)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 1 {
			t.Fatalf("%d affinity entries, want 1", len(es))
		}
		return es[0].Value.(bpfmaps.AffinityValue).Last
	}
	connectTo(t, d, svcAffinity4, 30000)
	opened := last()
	time.Sleep(1200 * time.Millisecond)
	// A packet of the connection found in the table (the caches dropped)
	// refreshes its entry, and with it the affinity.
	if err := d.bumpCTEpoch(); err != nil {
		t.Fatal(err)
	}
	ack := packet{src: podV4, dst: svcAffinity4, proto: policyapi.ProtoTCP, sport: 30000, dport: 80, tcpFlags: tcpACK, seq: 1}
	if ret, _ := runOut(t, d.fromPod, csumFrame(ack)); ret != actOK {
		t.Fatalf("ACK: got %s, want OK", actName(ret))
	}
	if got := last(); got < opened+uint64(time.Second) {
		t.Errorf("affinity entry last used %v after the connection opened, want at least 1s later (its ACK)", time.Duration(got-opened))
	}
}
