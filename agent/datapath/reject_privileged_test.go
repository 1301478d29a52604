//go:build linux

package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/internal/testenv"
	"lockstep.dev/lockstep/maps"
)

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
)

// A new TCP connection to a frontend without a backend is answered with a
// reset from the frontend, as kube-proxy's REJECT answers it: RST|ACK
// acknowledging the SYN (or what the segment carried), RST with the
// acknowledged sequence number for a segment with ACK, nothing for a
// reset. The answer goes back to the pod (redirect), with every checksum
// right, and the packet counts as service-no-backend.
func TestPrivilegedServiceNoBackendTCP(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	tcp := policy.ProtoTCP
	for _, fam := range []struct{ name, pod, svc string }{{"v4", podV4, svcEmpty4}, {"v6", podV6, svcEmpty6}} {
		for _, tc := range []struct {
			name             string
			flags            uint8
			payload          []byte
			wantFlags        uint8
			wantSeq, wantAck uint32
			answered         bool
		}{
			{"SYN", tcpSYN, nil, tcpRST | tcpACK, 0, 1001, true},
			{"SYN with data", tcpSYN, []byte("0123456789"), tcpRST | tcpACK, 0, 1011, true},
			{"FIN without ACK", tcpFIN, nil, tcpRST | tcpACK, 0, 1001, true},
			{"ACK", tcpACK | tcpPSH, []byte("abc"), tcpRST, 7777, 0, true},
			{"RST", tcpRST, nil, 0, 0, 0, false},
		} {
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				d.flushCT(t)
				req := packet{src: fam.pod, dst: fam.svc, proto: tcp, sport: 41000, dport: 80, tcpFlags: tc.flags, seq: 1000, ackSeq: 7777, payload: tc.payload}
				raw := csumFrame(req)
				before := counter(t, d, maps.ReasonServiceNoBackend)
				ret, out := runOut(t, d.fromPod, raw)
				if got := counter(t, d, maps.ReasonServiceNoBackend) - before; got != 1 {
					t.Errorf("service-no-backend grew by %d, want 1", got)
				}
				if !tc.answered {
					if ret != actShot {
						t.Errorf("got %s, want SHOT (a reset is never answered)", actName(ret))
					}
					return
				}
				if ret != actRedirect {
					t.Fatalf("got %s (%d), want the answer redirected to the pod", actName(ret), ret)
				}
				w := mustWire(t, "reset", out)
				checkAnswerHeaders(t, raw, w, fam.svc, fam.pod)
				if w.proto != tcp || w.sport != 80 || w.dport != 41000 {
					t.Errorf("reset %s %d → %d, want TCP 80 → 41000", protoName(w.proto), w.sport, w.dport)
				}
				if len(w.l4) != 20 || w.l4[12]>>4 != 5 {
					t.Errorf("reset has %d bytes of TCP, data offset %d, want 20 bytes and 5", len(w.l4), w.l4[12]>>4)
				}
				if w.tcpFlags != tc.wantFlags || w.seq != tc.wantSeq || w.ackSeq != tc.wantAck {
					t.Errorf("reset flags %#x seq %d ack %d, want flags %#x seq %d ack %d", w.tcpFlags, w.seq, w.ackSeq, tc.wantFlags, tc.wantSeq, tc.wantAck)
				}
			})
		}
	}
}

// checkAnswerHeaders checks the Ethernet and IP headers of an answer w to
// the frame raw: addresses swapped (the frontend answers), a fresh IP
// header with no options or extension headers, a TTL.
func checkAnswerHeaders(t *testing.T, raw []byte, w wire, from, to string) {
	t.Helper()
	if !bytes.Equal(w.macs[:6], raw[6:12]) || !bytes.Equal(w.macs[6:], raw[:6]) {
		t.Errorf("Ethernet addresses %x, want the request's swapped", w.macs)
	}
	if w.src != addr(from) || w.dst != addr(to) {
		t.Errorf("answer from %s to %s, want from %s to %s", w.src, w.dst, from, to)
	}
	if w.ttl == 0 {
		t.Errorf("answer has TTL 0")
	}
	if w.src.Is4() && (len(w.ip) != 20 || binary.BigEndian.Uint16(w.ip[6:])&0x1fff != 0) {
		t.Errorf("IPv4 header of %d bytes, fragment offset %d, want 20 and 0", len(w.ip), binary.BigEndian.Uint16(w.ip[6:])&0x1fff)
	}
}

// UDP and SCTP to a frontend without a backend get an ICMP (ICMPv6) port
// unreachable from the frontend, quoting the datagram's IP header and the
// first 8 bytes after it, so the client's socket learns of it
// (ECONNREFUSED).
func TestPrivilegedServiceNoBackendUnreachable(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	for _, fam := range []struct {
		name, pod, svc         string
		proto, typ, code, ipHL uint8
	}{
		{"v4", podV4, svcEmpty4, protoICMP, 3, 3, 20},
		{"v6", podV6, svcEmpty6, protoICMPv6, 1, 4, 40},
	} {
		for _, tc := range []struct {
			proto uint8
			port  uint16
		}{{policy.ProtoUDP, 1053}, {policy.ProtoSCTP, 9000}} {
			t.Run(fam.name+"/"+protoName(tc.proto), func(t *testing.T) {
				d.flushCT(t)
				req := packet{src: fam.pod, dst: fam.svc, proto: tc.proto, sport: 41000, dport: tc.port, payload: bytes.Repeat([]byte("x"), 300)}
				raw := csumFrame(req)
				before := counter(t, d, maps.ReasonServiceNoBackend)
				ret, out := runOut(t, d.fromPod, raw)
				if ret != actRedirect {
					t.Fatalf("got %s (%d), want the answer redirected to the pod", actName(ret), ret)
				}
				if got := counter(t, d, maps.ReasonServiceNoBackend) - before; got != 1 {
					t.Errorf("service-no-backend grew by %d, want 1", got)
				}
				w := mustWire(t, "port unreachable", out)
				checkAnswerHeaders(t, raw, w, fam.svc, fam.pod)
				if w.proto != fam.proto || w.icmpType != fam.typ || w.icmpCode != fam.code {
					t.Fatalf("answer protocol %d type %d code %d, want %d, %d, %d", w.proto, w.icmpType, w.icmpCode, fam.proto, fam.typ, fam.code)
				}
				quote := raw[14 : 14+int(fam.ipHL)+8]
				if got := w.l4[8:]; !bytes.Equal(got, quote) {
					t.Errorf("quote\n %x\nwant the datagram's IP header and 8 bytes\n %x", got, quote)
				}
			})
		}
	}
}

// Connections already made keep their backend when a frontend loses its
// last one; only new connections are refused.
func TestPrivilegedServiceNoBackendSparesConnections(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	want := svcScenario()
	mustApply(t, d, want)
	d.flushCT(t)
	syn := packet{src: podV4, dst: svcWeb4, proto: policy.ProtoTCP, sport: 41000, dport: 80}
	if ret, _ := runOut(t, d.fromPod, csumFrame(syn)); ret != actOK {
		t.Fatalf("SYN: got %s, want OK", actName(ret))
	}
	next := *want
	next.Services = cloneServices(want.Services)
	next.Services[frontend(svcWeb4, policy.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/web"}
	mustApply(t, d, &next)
	ack := syn
	ack.tcpFlags, ack.seq = tcpACK, 1
	ret, out := runOut(t, d.fromPod, csumFrame(ack))
	if w := mustWire(t, "ACK", out); ret != actOK || w.dst != addr("10.0.0.2") || w.dport != 8080 {
		t.Errorf("ACK of the connection: %s to %s:%d, want OK to 10.0.0.2:8080", actName(ret), w.dst, w.dport)
	}
	other := syn
	other.sport = 41001
	if ret, _ := runOut(t, d.fromPod, csumFrame(other)); ret != actRedirect {
		t.Errorf("a new connection: got %s, want a reset (redirect)", actName(ret))
	}
}
