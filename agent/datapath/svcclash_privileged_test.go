//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// The source ports a clash draws from (bpf/lib/service.h SVC_PORT_MIN,
// SVC_PORT_MAX).
const clashPortMin, clashPortMax = 61000, 65535

// A connection through a Service whose translated tuple is a live direct
// connection's gets another source port, from the clash range, on every
// packet; its replies go back to the client's own port from the
// frontend, and the direct connection's replies stay untranslated. A
// connection half-closed by a FIN still holds its tuple; one a RST closed
// does not. When every port of the range is taken, the first packet is
// dropped and counted as service-port-clash.
func TestPrivilegedServiceSourcePortClashPackets(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	const backend = "10.0.0.2"
	tcp := policyapi.ProtoTCP
	direct := packet{src: podV4, dst: backend, proto: tcp, sport: 43000, dport: 8080}
	viaSvc := packet{src: podV4, dst: svcWeb4, proto: tcp, sport: 43000, dport: 80}

	d.flushCT(t)
	runSteps(t, step{"SYN straight to the backend", d.fromPod, with(direct, tcpSYN), actOK})
	var moved uint16
	for _, what := range []string{"SYN via the Service", "ACK via the Service"} {
		flags := uint8(tcpSYN)
		if moved != 0 {
			flags = tcpACK
		}
		ret, out := runOut(t, d.fromPod, csumFrame(with(viaSvc, flags)))
		w := mustWire(t, what, out)
		if ret != actOK || w.dst != addr(backend) || w.dport != 8080 || w.sport < clashPortMin {
			t.Fatalf("%s: %s to %s:%d from port %d, want OK to %s:8080 from a port of %d-%d",
				what, actName(ret), w.dst, w.dport, w.sport, backend, clashPortMin, clashPortMax)
		}
		if moved != 0 && w.sport != moved {
			t.Fatalf("%s: from port %d, the SYN from %d", what, w.sport, moved)
		}
		moved = w.sport
	}
	for _, tc := range []struct {
		what     string
		dport    uint16
		wantSrc  string
		wantPort [2]uint16 // source, destination
	}{
		{"the Service connection's SYN-ACK", moved, svcWeb4, [2]uint16{80, 43000}},
		{"the direct connection's SYN-ACK", 43000, backend, [2]uint16{8080, 43000}},
	} {
		reply := packet{src: backend, dst: podV4, proto: tcp, sport: 8080, dport: tc.dport}
		ret, out := runOut(t, d.toPod, csumFrame(with(reply, tcpSYN|tcpACK)))
		w := mustWire(t, tc.what, out)
		if ret != actOK || w.src != addr(tc.wantSrc) || [2]uint16{w.sport, w.dport} != tc.wantPort {
			t.Errorf("%s: %s from %s:%d to port %d, want OK from %s:%d to port %d",
				tc.what, actName(ret), w.src, w.sport, w.dport, tc.wantSrc, tc.wantPort[0], tc.wantPort[1])
		}
	}

	for _, tc := range []struct {
		what  string
		flags uint8
		moved bool
	}{{"FIN", tcpFIN | tcpACK, true}, {"RST", tcpRST, false}} {
		sport := uint16(43100) + uint16(tc.flags)
		closed := packet{src: podV4, dst: backend, proto: tcp, sport: sport, dport: 8080}
		runSteps(t,
			step{"SYN straight to the backend", d.fromPod, with(closed, tcpSYN), actOK},
			step{tc.what + " straight to the backend", d.fromPod, with(closed, tc.flags), actOK},
		)
		ret, out := runOut(t, d.fromPod, csumFrame(with(packet{src: podV4, dst: svcWeb4, proto: tcp, sport: sport, dport: 80}, tcpSYN)))
		w := mustWire(t, "SYN via the Service after a "+tc.what, out)
		if ret != actOK || (w.sport != sport) != tc.moved {
			t.Errorf("SYN via the Service on the tuple of a connection a %s closed: %s from port %d, want OK, another port than %d: %v",
				tc.what, actName(ret), w.sport, sport, tc.moved)
		}
	}

	// Every port of the range taken, by live translated connections of
	// the pod from those ports to the same frontend.
	live := bpfmaps.SvcCTEntry{Expires: coarseNow(t) + uint64(time.Hour), Flags: bpfmaps.CTSvcRev,
		NatAddr: bpfmaps.AddrFrom(netip.MustParseAddr(svcWeb4)), NatPort: 80}
	for port := clashPortMin; port <= clashPortMax; port++ {
		k := ctKeyOf(loIfindex, packet{src: podV4, dst: backend, proto: tcp, sport: uint16(port), dport: 8080})
		if err := d.svcCT.Put(k, live); err != nil {
			t.Fatalf("fill port %d: %v", port, err)
		}
	}
	before := counter(t, d, bpfmaps.ReasonServicePortClash)
	runSteps(t,
		step{"SYN straight to the backend", d.fromPod, with(packet{src: podV4, dst: backend, proto: tcp, sport: 43001, dport: 8080}, tcpSYN), actOK},
		step{"SYN via the Service, every port taken", d.fromPod, with(packet{src: podV4, dst: svcWeb4, proto: tcp, sport: 43001, dport: 80}, tcpSYN), actShot},
	)
	if got := counter(t, d, bpfmaps.ReasonServicePortClash) - before; got != 1 {
		t.Errorf("service-port-clash grew by %d, want 1", got)
	}
}

// Two connections from one client port to two frontends of one backend
// (a pod's kernel gives them one port: their destinations differ) work at
// once, as under kube-proxy, whose conntrack gives the second one another
// source port: lockstep does too. Without that their translated tuples
// are one, and the second connection takes the first one's replies. TCP
// and UDP, both families, to another pod and hairpin (where the pod's
// kernel, not the dataplane, would also see one tuple twice). The
// backend's port unreachable reaches both UDP sockets: the error about
// the second is translated back to its own port.
func TestPrivilegedServiceSourcePortClash(t *testing.T) {
	testenv.Privileged(t)
	n := newPodNode(t)
	c := n.addPod(t, trHostC, trClient4, trClient6, true)
	b := n.addPod(t, trHostB, trBackend4, trBackend6, true)
	for _, srv := range []struct {
		ns   ns.NetNS
		addr string
	}{{c.ns, trClient4}, {c.ns, trClient6}, {b.ns, trBackend4}, {b.ns, trBackend6}} {
		serveEcho(t, srv.ns, hostPort(srv.addr, "8080"))
	}
	state := trState(true, true)
	second := map[string]string{svcWeb4: trBackend4, svcWeb6: trBackend6, svcSelf4: trClient4, svcSelf6: trClient6}
	for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP} {
		for fe, be := range second {
			state.Services[frontend(fe, proto, 81)] = &policy.ServiceEntry{Service: "ns/second", Backends: backends(8080, be)}
		}
	}
	state.Services[frontend(svcClosed4, policyapi.ProtoUDP, 81)] = &policy.ServiceEntry{Service: "ns/closed", Backends: backends(8081, trBackend4)}
	state.Services[frontend(svcClosed6, policyapi.ProtoUDP, 81)] = &policy.ServiceEntry{Service: "ns/closed", Backends: backends(8081, trBackend6)}
	mustApply(t, n.d, state)

	port := 40000
	for _, fe := range []string{svcWeb4, svcWeb6, svcSelf4, svcSelf6} {
		for _, proto := range []string{"tcp", "udp"} {
			port++
			t.Run(fmt.Sprintf("%s %s", proto, fe), func(t *testing.T) {
				first := dialFromPort(t, c.ns, proto, port, hostPort(fe, "80"))
				other := dialFromPort(t, c.ns, proto, port, hostPort(fe, "81"))
				sources := map[string]bool{}
				for round := range 3 {
					for i, conn := range []net.Conn{first, other} {
						msg := fmt.Sprintf("round %d connection %d", round, i)
						from, err := echoOnce(conn, proto, msg)
						if err != nil {
							t.Fatalf("%s, from port %d to %s: %v", msg, port, conn.RemoteAddr(), err)
						}
						sources[from] = true
					}
				}
				if len(sources) != 2 {
					t.Errorf("the server saw the two connections from %v, want two sources", sources)
				}
			})
		}
	}
	for _, fe := range []string{svcClosed4, svcClosed6} {
		port++
		t.Run("udp refused "+fe, func(t *testing.T) {
			first := dialFromPort(t, c.ns, "udp", port, hostPort(fe, "80"))
			other := dialFromPort(t, c.ns, "udp", port, hostPort(fe, "81"))
			for i, conn := range []net.Conn{first, other} {
				if from, err := echoOnce(conn, "udp", "anyone?"); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("connection %d, from port %d to %s: %q, %v; want ECONNREFUSED", i, port, conn.RemoteAddr(), from, err)
				}
			}
		})
	}
}

// dialFromPort connects, in n, a socket bound to port (SO_REUSEADDR, so
// that two sockets share it) to addr; the test closes it at its end.
func dialFromPort(t *testing.T, n ns.NetNS, proto string, port int, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{
		Timeout: 3 * time.Second,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	if proto == "tcp" {
		d.LocalAddr = &net.TCPAddr{Port: port}
	} else {
		d.LocalAddr = &net.UDPAddr{Port: port}
	}
	var conn net.Conn
	err := n.Do(func(ns.NetNS) (err error) {
		conn, err = d.Dial(proto, addr)
		return err
	})
	if err != nil {
		t.Fatalf("%s from port %d to %s: %v", proto, port, addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// echoOnce sends msg on conn and returns the source the echo server saw;
// over UDP it sends again, up to three times, while no answer comes (a
// fresh link resolves its neighbours first).
func echoOnce(conn net.Conn, proto, msg string) (string, error) {
	buf := make([]byte, 256)
	for try := 0; ; try++ {
		if _, err := conn.Write([]byte(msg)); err != nil {
			return "", err
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		k, err := conn.Read(buf)
		if err != nil {
			if proto == "udp" && errTimeout(err) && try < 2 {
				continue
			}
			return "", err
		}
		from, got, ok := strings.Cut(string(buf[:k]), " ")
		if !ok || got != msg {
			return "", fmt.Errorf("answered %q, want the source and %q", buf[:k], msg)
		}
		return from, nil
	}
}

// serveEcho answers, on TCP and UDP addr (host:port) in n, every message
// with the address it came from, a space and the message, keeping TCP
// connections open until the client closes them.
func serveEcho(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	l, pc := listenTCPUDP(t, n, addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256)
				for {
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(c.RemoteAddr().String() + " " + string(buf[:k]))); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 256)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(from.String()+" "+string(buf[:k])), from)
		}
	}()
}
