//go:build linux

package datapath

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// The Service scenario: the verdict scenario's pod (10.0.0.1 / fd00::1,
// identity 400, isolated both ways, egress allowed to identity 300 on TCP
// 80 and 8000-8100, UDP 53, SCTP 9000) reaches these frontends:
//
//	svcWeb     10.96.0.10 / fd00:96::10: TCP 80 → :8080, UDP 1053 → :53,
//	           SCTP 9000 → :9000 of 10.0.0.2 / fd00::2 (identity 300)
//	svcOther   10.96.0.11 TCP 80 → 10.0.0.3:8080 (identity 301: denied)
//	svcEmpty   10.96.0.12 / fd00:96::12, TCP 80, UDP 1053, SCTP 9000: no backend
//	svcSelf    10.96.0.13 / fd00:96::13 TCP 80 → the pod itself, :8080
//	svcWrongPort 10.96.0.14 TCP 8080 → 10.0.0.2:81 (port 81 denied)
//
// None of them is allowed untranslated: a ClusterIP is the world to
// policy, and the world may only be reached on TCP 8443.
const (
	svcWeb4, svcWeb6     = "10.96.0.10", "fd00:96::10"
	svcOther4            = "10.96.0.11"
	svcEmpty4, svcEmpty6 = "10.96.0.12", "fd00:96::12"
	svcSelf4, svcSelf6   = "10.96.0.13", "fd00:96::13"
	svcWrongPort4        = "10.96.0.14"
	idPod                = policyapi.Peer(400)
)

func frontend(a string, proto uint8, port uint16) policy.ServiceFrontend {
	return policy.ServiceFrontend{Addr: addr(a), Port: port, Proto: proto}
}

func backends(port uint16, addrs ...string) []policy.ServiceBackend {
	var out []policy.ServiceBackend
	for _, a := range addrs {
		out = append(out, policy.ServiceBackend{Addr: addr(a), Port: port})
	}
	return out
}

// webPorts are svcWeb's ports: frontend port → backend port, by protocol.
var webPorts = map[uint8][2]uint16{
	policyapi.ProtoTCP:  {80, 8080},
	policyapi.ProtoUDP:  {1053, 53},
	policyapi.ProtoSCTP: {9000, 9000},
}

func svcScenario() *policy.Desired {
	d := scenario(true, true)
	tcp, udp, sctp := policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP
	d.Services = map[policy.ServiceFrontend]*policy.ServiceEntry{
		frontend(svcOther4, tcp, 80):       {Service: "ns/other", Backends: backends(8080, "10.0.0.3")},
		frontend(svcSelf4, tcp, 80):        {Service: "ns/self", Backends: backends(8080, podV4)},
		frontend(svcSelf6, tcp, 80):        {Service: "ns/self", Backends: backends(8080, podV6)},
		frontend(svcWrongPort4, tcp, 8080): {Service: "ns/wrong", Backends: backends(81, "10.0.0.2")},
		frontend(svcEmpty4, tcp, 80):       {Service: "ns/empty"},
		frontend(svcEmpty4, udp, 1053):     {Service: "ns/empty"},
		frontend(svcEmpty4, sctp, 9000):    {Service: "ns/empty"},
		frontend(svcEmpty6, tcp, 80):       {Service: "ns/empty"},
		frontend(svcEmpty6, udp, 1053):     {Service: "ns/empty"},
		frontend(svcEmpty6, sctp, 9000):    {Service: "ns/empty"},
	}
	for proto, pp := range webPorts {
		d.Services[frontend(svcWeb4, proto, pp[0])] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(pp[1], "10.0.0.2")}
		d.Services[frontend(svcWeb6, proto, pp[0])] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(pp[1], "fd00::2")}
	}
	return d
}

// svcFamily is one address family of the scenario.
type svcFamily struct {
	name, pod, web, backend string
}

var svcFamilies = []svcFamily{
	{"v4", podV4, svcWeb4, "10.0.0.2"},
	{"v6", podV6, svcWeb6, "fd00::2"},
}

// mustWire parses raw and checks its checksums.
func mustWire(t *testing.T, what string, raw []byte) wire {
	t.Helper()
	w, err := parseWire(raw)
	if err != nil {
		t.Fatalf("%s: parse: %v", what, err)
	}
	if err := w.checkChecksums(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	return w
}

// A connection to a frontend is translated to its backend in from_pod,
// judged by the egress policy on the backend, and its replies are
// translated back to the frontend in to_pod: TCP, UDP and SCTP, both
// families, every checksum right. Untranslated, the same packets would be
// to the world, which the policy does not allow.
func TestPrivilegedServiceTranslation(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	for _, fam := range svcFamilies {
		for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP} {
			t.Run(fam.name+"/"+protoName(proto), func(t *testing.T) {
				d.flushCT(t)
				fport, bport := webPorts[proto][0], webPorts[proto][1]
				payload := []byte("translate me")
				req := packet{src: fam.pod, dst: fam.web, proto: proto, sport: 41000, dport: fport, seq: 1000, payload: payload}
				reply := packet{src: fam.backend, dst: fam.pod, proto: proto, sport: bport, dport: 41000, tcpFlags: 0x12, seq: 5000, ackSeq: 1001, payload: payload}

				before := counter(t, d, bpfmaps.ReasonAllowedNew)
				in := csumFrame(req)
				ret, out := runOut(t, d.fromPod, in)
				if ret != actOK {
					t.Fatalf("request to %s:%d: got %s, want OK", fam.web, fport, actName(ret))
				}
				if got := counter(t, d, bpfmaps.ReasonAllowedNew) - before; got != 1 {
					t.Errorf("allowed-new grew by %d, want 1", got)
				}
				w := mustWire(t, "translated request", out)
				if w.src != addr(fam.pod) || w.sport != 41000 || w.dst != addr(fam.backend) || w.dport != bport {
					t.Errorf("translated request %s:%d → %s:%d, want %s:41000 → %s:%d", w.src, w.sport, w.dst, w.dport, fam.pod, fam.backend, bport)
				}
				if proto == policyapi.ProtoSCTP {
					orig, _ := parseWire(in)
					if !bytes.Equal(w.l4, orig.l4) {
						t.Errorf("SCTP packet changed beyond its addresses")
					}
				}

				ret, out = runOut(t, d.toPod, csumFrame(reply))
				if ret != actOK {
					t.Fatalf("reply from %s:%d: got %s, want OK", fam.backend, bport, actName(ret))
				}
				w = mustWire(t, "translated reply", out)
				if w.src != addr(fam.web) || w.sport != fport || w.dst != addr(fam.pod) || w.dport != 41000 {
					t.Errorf("translated reply %s:%d → %s:%d, want %s:%d → %s:41000", w.src, w.sport, w.dst, w.dport, fam.web, fport, fam.pod)
				}
				if !bytes.HasSuffix(w.l4, payload) {
					t.Errorf("reply payload changed")
				}

				// Later packets: from this CPU's flow cache, then (the
				// caches dropped) from lockstep_svc_ct.
				for _, path := range []string{"flow cache", "table"} {
					if path == "table" {
						if err := d.bumpCTEpoch(); err != nil {
							t.Fatal(err)
						}
					}
					next := req
					next.tcpFlags, next.seq, next.ackSeq = 0x10, 1001, 5001
					ret, out = runOut(t, d.fromPod, csumFrame(next))
					w = mustWire(t, "next request ("+path+")", out)
					if ret != actOK || w.dst != addr(fam.backend) || w.dport != bport {
						t.Errorf("next request (%s): %s to %s:%d, want OK to %s:%d", path, actName(ret), w.dst, w.dport, fam.backend, bport)
					}
				}
				if got := counter(t, d, bpfmaps.ReasonAllowedNew) - before; got != 1 {
					t.Errorf("allowed-new grew by %d over the connection, want 1 (later packets are tracked)", got)
				}
			})
		}
	}
}

// A UDP datagram without a checksum (IPv4 allows it) keeps none.
func TestPrivilegedServiceUDPWithoutChecksum(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	raw := csumFrame(packet{src: podV4, dst: svcWeb4, proto: policyapi.ProtoUDP, sport: 4000, dport: 1053, payload: []byte("x")})
	clear(raw[14+20+6 : 14+20+8])
	ret, out := runOut(t, d.fromPod, raw)
	if ret != actOK {
		t.Fatalf("got %s, want OK", actName(ret))
	}
	w := mustWire(t, "translated datagram", out)
	if w.dst != addr("10.0.0.2") || w.dport != 53 {
		t.Errorf("translated to %s:%d, want 10.0.0.2:53", w.dst, w.dport)
	}
	if c := w.l4[6:8]; c[0] != 0 || c[1] != 0 {
		t.Errorf("UDP checksum %x, want none (0)", c)
	}
}

// Policy judges the backend, not the frontend: a frontend whose backend's
// identity the egress policy does not allow is denied, so is one whose
// backend port it does not allow, whatever the Service port; a frontend
// the pod's own egress allows reaches it.
func TestPrivilegedServicePolicyJudgesBackend(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	tcp := policyapi.ProtoTCP
	for _, tc := range []struct {
		name   string
		pkt    packet
		want   uint32
		reason bpfmaps.Reason
		peer   policyapi.Peer
		dst    netip.AddrPort
	}{
		{"allowed identity, port in range", packet{src: podV4, dst: svcWeb4, proto: tcp, sport: 5, dport: 80}, actOK, bpfmaps.ReasonAllowedNew, idWeb, netip.MustParseAddrPort("10.0.0.2:8080")},
		{"backend identity not allowed", packet{src: podV4, dst: svcOther4, proto: tcp, sport: 5, dport: 80}, actShot, bpfmaps.ReasonPolicyEgress, idOther, netip.MustParseAddrPort("10.0.0.3:8080")},
		{"backend port not allowed", packet{src: podV4, dst: svcWrongPort4, proto: tcp, sport: 5, dport: 8080}, actShot, bpfmaps.ReasonPolicyEgress, idWeb, netip.MustParseAddrPort("10.0.0.2:81")},
		{"a frontend lockstep does not know: world", packet{src: podV4, dst: "10.96.0.99", proto: tcp, sport: 5, dport: 80}, actShot, bpfmaps.ReasonPolicyEgress, policyapi.PeerWorld, netip.MustParseAddrPort("10.96.0.99:80")},
		{"a known address on another port: world", packet{src: podV4, dst: svcWeb4, proto: tcp, sport: 5, dport: 81}, actShot, bpfmaps.ReasonPolicyEgress, policyapi.PeerWorld, netip.MustParseAddrPort("10.96.0.10:81")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			rd, err := d.Events()
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			before := counter(t, d, tc.reason)
			ret, _ := runOut(t, d.fromPod, csumFrame(tc.pkt))
			if ret != tc.want {
				t.Errorf("got %s, want %s", actName(ret), actName(tc.want))
			}
			if got := counter(t, d, tc.reason) - before; got != 1 {
				t.Errorf("%s grew by %d, want 1", tc.reason, got)
			}
			ev := readEvent(t, rd)
			if got := netip.AddrPortFrom(ev.Daddr.Netip(), ev.Dport); got != tc.dst || ev.Peer != uint32(tc.peer) || ev.Reason != tc.reason {
				t.Errorf("event to %s peer %d reason %s, want %s peer %d reason %s", got, ev.Peer, ev.Reason, tc.dst, tc.peer, tc.reason)
			}
		})
	}
}

func readEvent(t *testing.T, rd *bpfmaps.EventReader) bpfmaps.Event {
	t.Helper()
	rd.SetDeadline(deadlineIn(1))
	ev, err := rd.Read()
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	return ev
}

func deadlineIn(seconds int) time.Time { return time.Now().Add(time.Duration(seconds) * time.Second) }

// cloneServices copies a Services table, sharing its entries, as
// policy.Incremental hands over the entries that did not change.
func cloneServices(m map[policy.ServiceFrontend]*policy.ServiceEntry) map[policy.ServiceFrontend]*policy.ServiceEntry {
	out := make(map[policy.ServiceFrontend]*policy.ServiceEntry, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Frontends lockstep cannot translate stay kube-proxy's, untouched:
// SCTP whose backend listens on another port (its CRC32c covers the
// ports), and protocols without ports. Backends of the other family are
// ignored: no 4→6 translation.
func TestPrivilegedServiceLeftToKubeProxy(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	s := svcScenario()
	sctpMoved := frontend("10.96.0.30", policyapi.ProtoSCTP, 9000)
	s.Services[sctpMoved] = &policy.ServiceEntry{Service: "ns/sctp", Backends: backends(9001, "10.0.0.2")}
	s.Services[frontend("10.96.0.31", protoICMP, 0)] = &policy.ServiceEntry{Service: "ns/icmp", Backends: backends(0, "10.0.0.2")}
	mixed := frontend("10.96.0.32", policyapi.ProtoTCP, 80)
	s.Services[mixed] = &policy.ServiceEntry{Service: "ns/mixed", Backends: append(backends(8080, "10.0.0.2"), backends(8080, "fd00::2")...)}
	mustApply(t, d, s)

	live := readServices(t, d, int(d.Generation()&1))
	if _, ok := live[sctpMoved]; ok {
		t.Errorf("the SCTP frontend with a backend on another port is in the maps")
	}
	if got := live[mixed].Backends; len(got) != 1 || got[0].Addr != addr("10.0.0.2") {
		t.Errorf("the IPv4 frontend's backends in the maps: %v, want only 10.0.0.2", got)
	}
	if len(live) != len(s.Services)-2 {
		t.Errorf("%d frontends in the maps, want %d (all but the SCTP and the ICMP one)", len(live), len(s.Services)-2)
	}

	d.flushCT(t)
	raw := csumFrame(packet{src: podV4, dst: "10.96.0.30", proto: policyapi.ProtoSCTP, sport: 5, dport: 9000})
	ret, out := runOut(t, d.fromPod, raw)
	if ret != actShot {
		t.Errorf("SCTP to the untranslated frontend: got %s, want SHOT (judged on the ClusterIP, the world)", actName(ret))
	}
	if w := mustWire(t, "SCTP", out); w.dst != addr("10.96.0.30") {
		t.Errorf("SCTP to the untranslated frontend went to %s", w.dst)
	}
}
