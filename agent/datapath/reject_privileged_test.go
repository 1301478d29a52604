//go:build linux

package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
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
	tcp := policyapi.ProtoTCP
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
				before := counter(t, d, bpfmaps.ReasonServiceNoBackend)
				ret, out := runOut(t, d.fromPod, raw)
				if got := counter(t, d, bpfmaps.ReasonServiceNoBackend) - before; got != 1 {
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
		}{{policyapi.ProtoUDP, 1053}, {policyapi.ProtoSCTP, 9000}} {
			t.Run(fam.name+"/"+protoName(tc.proto), func(t *testing.T) {
				d.flushCT(t)
				req := packet{src: fam.pod, dst: fam.svc, proto: tc.proto, sport: 41000, dport: tc.port, payload: bytes.Repeat([]byte("x"), 300)}
				raw := csumFrame(req)
				before := counter(t, d, bpfmaps.ReasonServiceNoBackend)
				ret, out := runOut(t, d.fromPod, raw)
				if ret != actRedirect {
					t.Fatalf("got %s (%d), want the answer redirected to the pod", actName(ret), ret)
				}
				if got := counter(t, d, bpfmaps.ReasonServiceNoBackend) - before; got != 1 {
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
	syn := packet{src: podV4, dst: svcWeb4, proto: policyapi.ProtoTCP, sport: 41000, dport: 80}
	if ret, _ := runOut(t, d.fromPod, csumFrame(syn)); ret != actOK {
		t.Fatalf("SYN: got %s, want OK", actName(ret))
	}
	next := *want
	next.Services = cloneServices(want.Services)
	next.Services[frontend(svcWeb4, policyapi.ProtoTCP, 80)] = &policy.ServiceEntry{Service: "ns/web"}
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

// icmpErrorFrame is an ICMP (ICMPv6) error of type typ and code from src
// to dst quoting the IP header and first 8 L4 bytes of quoted, with every
// checksum right, the quoted packet's own included.
func icmpErrorFrame(src, dst string, typ, code uint8, quoted packet) []byte {
	q := csumFrame(quoted)[14:]
	ihl, proto := 20, uint8(protoICMP)
	if addr(src).Is6() {
		ihl, proto = 40, protoICMPv6
	}
	raw := frame(packet{src: src, dst: dst, proto: proto, icmpType: typ})
	l4 := len(raw) - 8
	raw[l4+1] = code
	clear(raw[l4+4:])
	raw = append(raw, q[:ihl+8]...)
	if proto == protoICMP {
		binary.BigEndian.PutUint16(raw[16:], uint16(len(raw)-14))
	} else {
		binary.BigEndian.PutUint16(raw[18:], uint16(len(raw)-54))
	}
	return withChecksums(raw)
}

// quoteOf parses the packet quoted by the ICMP error w: its addresses and
// ports, and whether its IPv4 header checksum is right.
func quoteOf(t *testing.T, w wire) (src, dst netip.AddrPort, headerOK bool) {
	t.Helper()
	q := w.l4[8:]
	if w.src.Is4() {
		if len(q) < 28 {
			t.Fatalf("quote of %d bytes", len(q))
		}
		ihl := int(q[0]&0xf) * 4
		src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[12:16])), binary.BigEndian.Uint16(q[ihl:]))
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[16:20])), binary.BigEndian.Uint16(q[ihl+2:]))
		return src, dst, fold(sum16(0, q[:ihl])) == 0
	}
	if len(q) < 48 {
		t.Fatalf("quote of %d bytes", len(q))
	}
	src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[8:24])), binary.BigEndian.Uint16(q[40:]))
	dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[24:40])), binary.BigEndian.Uint16(q[42:]))
	return src, dst, true
}

// ICMP errors about a translated connection are translated as conntrack
// translates them for kube-proxy, so the kernel that gets one finds its
// socket: the backend's port unreachable reaches the client from the
// frontend, quoting the frontend; a router's error keeps the router's
// address and quotes the frontend; an error the client sends about a
// reply from the frontend goes to the backend, quoting it. With the
// client's port taken by a direct flow to the backend (a source port
// clash), the quotes' client port is translated too: to the client's own
// port towards it, to the drawn one towards the backend.
func TestPrivilegedServiceICMPErrorsTranslated(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	udp := policyapi.ProtoUDP
	for _, fam := range []struct {
		name, pod, fe, backend, router string
		typ, code                      uint8
	}{
		{"v4", podV4, svcWeb4, "10.0.0.2", "10.0.0.3", 3, 3},
		{"v6", podV6, svcWeb6, "fd00::2", "fd00::99", 1, 4},
	} {
		ap := func(a string, port uint16) netip.AddrPort { return netip.AddrPortFrom(addr(a), port) }
		for _, tc := range []struct {
			name                 string
			toPod, router, reply bool // sent to the pod; by a router; about the reply the client saw
		}{
			{"the backend's port unreachable", true, false, false},
			{"a router's error", true, true, false},
			{"the client's port unreachable", false, false, true},
		} {
			for _, clash := range []bool{false, true} {
				name := fam.name + "/" + tc.name
				if clash {
					name += "/source port clash"
				}
				t.Run(name, func(t *testing.T) {
					d.flushCT(t)
					if clash {
						direct := packet{src: fam.pod, dst: fam.backend, proto: udp, sport: 41000, dport: 53}
						if ret, _ := runOut(t, d.fromPod, csumFrame(direct)); ret != actOK {
							t.Fatalf("direct datagram: %s", actName(ret))
						}
					}
					open := packet{src: fam.pod, dst: fam.fe, proto: udp, sport: 41000, dport: 1053}
					ret, out := runOut(t, d.fromPod, csumFrame(open))
					if ret != actOK {
						t.Fatalf("opening datagram: %s", actName(ret))
					}
					port := mustWire(t, "opening datagram", out).sport // the client's port towards the backend
					if moved := port != 41000; moved != clash {
						t.Fatalf("opening datagram left from port %d, want another port than 41000: %v", port, clash)
					}
					sent := packet{src: fam.pod, dst: fam.backend, proto: udp, sport: port, dport: 53} // as translated
					seen := packet{src: fam.fe, dst: fam.pod, proto: udp, sport: 1053, dport: 41000}   // a reply, as the client saw it
					prog, errFrame := d.toPod, icmpErrorFrame(fam.backend, fam.pod, fam.typ, fam.code, sent)
					from, to, qsrc, qdst := fam.fe, fam.pod, ap(fam.pod, 41000), ap(fam.fe, 1053)
					switch {
					case tc.router:
						errFrame = icmpErrorFrame(fam.router, fam.pod, fam.typ, fam.code, sent)
						from = fam.router
					case tc.reply:
						prog, errFrame = d.fromPod, icmpErrorFrame(fam.pod, fam.fe, fam.typ, fam.code, seen)
						from, to, qsrc, qdst = fam.pod, fam.backend, ap(fam.backend, 53), ap(fam.pod, port)
					}
					ret, out = runOut(t, prog, errFrame)
					if ret != actOK {
						t.Fatalf("error: got %s, want OK", actName(ret))
					}
					w := mustWire(t, "translated error", out)
					if w.src != addr(from) || w.dst != addr(to) {
						t.Errorf("error from %s to %s, want from %s to %s", w.src, w.dst, from, to)
					}
					qs, qd, ok := quoteOf(t, w)
					if qs != qsrc || qd != qdst {
						t.Errorf("quote %s → %s, want %s → %s", qs, qd, qsrc, qdst)
					}
					if !ok {
						t.Errorf("the quoted IPv4 header's checksum is wrong")
					}
				})
			}
		}
	}
}

// A frontend whose Service has backends, none for this node's pods
// (internalTrafficPolicy Local: policy.ServiceEntry.NoLocalBackend), drops
// new connections without an answer, as kube-proxy does, and counts them
// as service-no-backend; once the node gets a backend the same frontend
// translates, and dropping again after that is one apply away. Both
// families, TCP and UDP.
func TestPrivilegedServiceNoLocalBackend(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	const noLocal4, noLocal6 = "10.96.0.16", "fd00:96::16"
	fams := []struct{ name, pod, svc, backend string }{{"v4", podV4, noLocal4, "10.0.0.2"}, {"v6", podV6, noLocal6, "fd00::2"}}
	state := func(local bool) *policy.Desired {
		s := svcScenario()
		for _, fam := range fams {
			for proto, pp := range webPorts {
				if proto == policyapi.ProtoSCTP {
					continue
				}
				e := &policy.ServiceEntry{Service: "ns/local", NoLocalBackend: true}
				if local {
					e = &policy.ServiceEntry{Service: "ns/local", Backends: backends(pp[1], fam.backend)}
				}
				s.Services[frontend(fam.svc, proto, pp[0])] = e
			}
		}
		return s
	}
	for i, local := range []bool{false, true, false} {
		mustApply(t, d, state(local))
		for _, fam := range fams {
			for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP} {
				t.Run(fmt.Sprintf("%d/%s/%s", i, fam.name, protoName(proto)), func(t *testing.T) {
					d.flushCT(t)
					fport, bport := webPorts[proto][0], webPorts[proto][1]
					req := packet{src: fam.pod, dst: fam.svc, proto: proto, sport: 41000, dport: fport, tcpFlags: tcpSYN, seq: 1000}
					before := counter(t, d, bpfmaps.ReasonServiceNoBackend)
					ret, out := runOut(t, d.fromPod, csumFrame(req))
					grew := counter(t, d, bpfmaps.ReasonServiceNoBackend) - before
					if local {
						w := mustWire(t, "translated request", out)
						if ret != actOK || w.dst != addr(fam.backend) || w.dport != bport || grew != 0 {
							t.Errorf("with a local backend: %s to %s:%d, service-no-backend +%d; want OK to %s:%d, +0", actName(ret), w.dst, w.dport, grew, fam.backend, bport)
						}
						return
					}
					if ret != actShot || grew != 1 {
						t.Errorf("without a local backend: %s, service-no-backend +%d; want SHOT (no answer), +1", actName(ret), grew)
					}
				})
			}
		}
	}
}
