//go:build linux

package iptables

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The Service topology: newTrafficNode's client a (identity 300) and
// server b (identity 400), with a second client c (identity 301) and a
// second server d (identity 400). The node routes the Service ranges to
// the remote host, as a node's default route would: a packet to a
// ClusterIP that nothing translates leaves the node.
const (
	svcClient2  = "10.77.0.12" // pod c, host veth lsipt-c
	svcClient26 = "fd77::12"
	svcServer2  = "10.77.0.13" // pod d, host veth lsipt-d
	svcServer26 = "fd77::13"
)

// The frontends: web (TCP 80 to port 8080) and dns (UDP 53 to 5353) on
// one ClusterIP per family, and a TCP and a UDP port without backends on
// another.
var (
	svcIP     = map[Family]string{IPv4: "10.96.0.10", IPv6: "fd96::10"}
	svcIPNone = map[Family]string{IPv4: "10.96.0.20", IPv6: "fd96::20"}
)

type svcNode struct {
	*trafficNode
	client2, server2 ns.NetNS
}

func newSvcNode(t *testing.T) *svcNode {
	t.Helper()
	sn := &svcNode{trafficNode: newTrafficNode(t), client2: newNetns(t), server2: newNetns(t)}
	sn.wirePod(t, sn.client2, "lsipt-c", svcClient2, svcClient26)
	sn.wirePod(t, sn.server2, "lsipt-d", svcServer2, svcServer26)
	err := sn.node.Do(func(ns.NetNS) error {
		for dst, via := range map[string]string{"10.96.0.0/16": trafficRemote, "fd96::/64": trafficRemote6} {
			_, ipnet, _ := net.ParseCIDR(dst)
			if err := netlink.RouteAdd(&netlink.Route{Dst: ipnet, Gw: net.ParseIP(via)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("route the Service ranges: %v", err)
	}
	return sn
}

func (sn *svcNode) pod(name string) ns.NetNS {
	return map[string]ns.NetNS{"a": sn.client, "b": sn.server, "c": sn.client2, "d": sn.server2, "node": sn.node}[name]
}

// hostPort joins an address and a port of either family.
func hostPort(a string, port int) string { return net.JoinHostPort(a, strconv.Itoa(port)) }

// svcTrafficState: a's egress allows TCP 8080 and UDP 5353 to identity
// 400 (and nothing to the ClusterIPs: policy is judged on the backend);
// c's egress is open. The servers' ingress allows those ports from 300
// and from 400 (themselves: hairpin), their egress TCP 8080 to 400. web
// and dns go to b (web to d too when both), the no-backend ports to
// nothing.
func svcTrafficState(both bool, affinity time.Duration) *policy.Desired {
	a4, a6 := addr(trafficClient), addr(trafficClient6)
	b4, b6 := addr(trafficServer), addr(trafficServer6)
	c4, c6 := addr(svcClient2), addr(svcClient26)
	d4, d6 := addr(svcServer2), addr(svcServer26)
	server := func(v4, v6 netip.Addr) *policy.EndpointPolicy {
		return &policy.EndpointPolicy{IPv4: v4, IPv6: v6, IngressIsolated: true, EgressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(8080, 8080),
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}: ports(5353, 5353),
			{Peer: 400, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(8080, 8080),
			{Peer: 400, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}:  ports(8080, 8080),
		}}
	}
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			a4: {Identity: 300, CIDRClass: policyapi.NoCIDRClass}, a6: {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			b4: {Identity: 400, CIDRClass: policyapi.NoCIDRClass}, b6: {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
			c4: {Identity: 301, CIDRClass: policyapi.NoCIDRClass}, c6: {Identity: 301, CIDRClass: policyapi.NoCIDRClass},
			d4: {Identity: 400, CIDRClass: policyapi.NoCIDRClass}, d6: {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{
			"lsipt-a": {IPv4: a4, IPv6: a6, EgressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: 400, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}: ports(8080, 8080),
				{Peer: 400, Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}: ports(5353, 5353),
			}},
			"lsipt-b": server(b4, b6),
			"lsipt-c": {IPv4: c4, IPv6: c6},
			"lsipt-d": server(d4, d6),
		},
		Services: map[policy.ServiceFrontend]*policy.ServiceEntry{},
	}
	for _, f := range families {
		b, dd := b4, d4
		if f == IPv6 {
			b, dd = b6, d6
		}
		web := &policy.ServiceEntry{Service: "default/web", AffinityTimeout: affinity, Backends: []policy.ServiceBackend{{Addr: b, Port: 8080}}}
		if both {
			web.Backends = append(web.Backends, policy.ServiceBackend{Addr: dd, Port: 8080})
		}
		d.Services[policy.ServiceFrontend{Addr: addr(svcIP[f]), Port: 80, Proto: policyapi.ProtoTCP}] = web
		d.Services[policy.ServiceFrontend{Addr: addr(svcIP[f]), Port: 53, Proto: policyapi.ProtoUDP}] = &policy.ServiceEntry{Service: "kube-system/dns", Backends: []policy.ServiceBackend{{Addr: b, Port: 5353}}}
		d.Services[policy.ServiceFrontend{Addr: addr(svcIPNone[f]), Port: 80, Proto: policyapi.ProtoTCP}] = &policy.ServiceEntry{Service: "default/none"}
		d.Services[policy.ServiceFrontend{Addr: addr(svcIPNone[f]), Port: 53, Proto: policyapi.ProtoUDP}] = &policy.ServiceEntry{Service: "default/none"}
	}
	return d
}

// serveUDP answers every datagram to addr in n with "ok" until t ends.
func serveUDP(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	var c net.PacketConn
	if err := n.Do(func(ns.NetNS) (err error) {
		c, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on udp %s: %v", addr, err)
	}
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			c.WriteTo([]byte("ok"), from)
		}
	}()
	t.Cleanup(func() { c.Close() })
}

// exchangeUDP sends a datagram from n to addr on a connected socket and
// waits for the answer: nil when "ok" comes back, the socket's error
// otherwise (ECONNREFUSED when an ICMP port unreachable did), or
// os.ErrDeadlineExceeded.
func exchangeUDP(n ns.NetNS, addr string, timeout time.Duration) error {
	var result error
	_ = n.Do(func(ns.NetNS) error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			result = err
			return nil
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte("hi")); err != nil {
			result = err
			return nil
		}
		buf := make([]byte, 8)
		k, err := c.Read(buf)
		switch {
		case err != nil:
			result = err
		case string(buf[:k]) != "ok":
			result = errors.New("unexpected answer " + string(buf[:k]))
		}
		return nil
	})
	return result
}

// dialTCP connects from n to addr and returns what the server wrote, or
// the error.
func dialTCP(n ns.NetNS, addr string, timeout time.Duration) (string, error) {
	var out string
	var result error
	_ = n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			result = err
			return nil
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		out, result = string(b), err
		return nil
	})
	return out, result
}

// serveName answers every TCP connection to addr in n with name.
func serveName(t *testing.T, n ns.NetNS, addr, name string) {
	t.Helper()
	var l net.Listener
	if err := n.Do(func(ns.NetNS) (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(name))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
}

// refusedPromptly reports whether a TCP connect from n to addr fails with
// ECONNREFUSED within a second, and a UDP exchange with addrUDP gets one
// too: refused, not dropped in silence.
func refusedPromptly(t *testing.T, n ns.NetNS, addr, addrUDP string) {
	t.Helper()
	start := time.Now()
	_, err := dialTCP(n, addr, 3*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
		t.Errorf("TCP to %s: %v after %v, want ECONNREFUSED at once", addr, err, time.Since(start).Round(time.Millisecond))
	}
	start = time.Now()
	err = exchangeUDP(n, addrUDP, 3*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
		t.Errorf("UDP to %s: %v after %v, want ECONNREFUSED (an ICMP port unreachable) at once", addrUDP, err, time.Since(start).Round(time.Millisecond))
	}
}

// servePorts starts TCP 8080 and UDP 5353 on b (and d) in both families.
func (sn *svcNode) servePorts(t *testing.T) {
	t.Helper()
	for _, s := range []struct {
		n      ns.NetNS
		v4, v6 string
		name   string
	}{{sn.server, trafficServer, trafficServer6, "b"}, {sn.server2, svcServer2, svcServer26, "d"}} {
		for _, a := range []string{s.v4, s.v6} {
			serveName(t, s.n, hostPort(a, 8080), s.name)
			serveUDP(t, s.n, hostPort(a, 5353))
		}
	}
}

// waitAnswers waits until a TCP connection from n to each of addrs gets
// an answer, lockstep not yet in force: the links may still be coming up.
func waitAnswers(t *testing.T, n ns.NetNS, addrs ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range addrs {
		for {
			if out, err := dialTCP(n, a, 500*time.Millisecond); err == nil && out != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not answer without policy: the topology is broken", a)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitServers waits until a and c reach both servers directly in both
// families, lockstep not yet in force (IPv6 neighbour discovery on new
// links may take a moment): a connection that fails later fails because
// of lockstep.
func (sn *svcNode) waitServers(t *testing.T) {
	t.Helper()
	for _, from := range []ns.NetNS{sn.client, sn.client2} {
		waitAnswers(t, from, hostPort(trafficServer, 8080), hostPort(svcServer2, 8080), hostPort(trafficServer6, 8080), hostPort(svcServer26, 8080))
	}
}

// reaches reports whether a TCP connection from n to addr gets an answer,
// retrying twice: a loaded machine, not the policy, may lose one.
func reaches(n ns.NetNS, addr string) bool {
	for range 3 {
		if out, err := dialTCP(n, addr, 700*time.Millisecond); err == nil && out != "" {
			return true
		}
	}
	return false
}

// TestPrivilegedServiceTraffic (standalone mode: the dataplane
// translates) sends real TCP and UDP through ClusterIPs of both families
// in both iptables modes: policy is judged on the backend after the DNAT
// (a, allowed to the server's pods and not to the ClusterIP, gets
// through; c, which the server does not allow, does not), a frontend
// without backends is refused at once, not dropped, and the node's own
// traffic is not translated.
func TestPrivilegedServiceTraffic(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			sn := newSvcNode(t)
			sn.servePorts(t)
			sn.waitServers(t)
			d, err := New(Options{Mode: m, Runner: nsRunner{sn.node}, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			want := svcTrafficState(false, 0)
			attachAll(t, d, want)
			mustApply(t, d, want)
			for _, f := range families {
				web, dns := hostPort(svcIP[f], 80), hostPort(svcIP[f], 53)
				if !reaches(sn.client, web) {
					t.Errorf("%s: a to web: no connection, want one (a may reach the server)", f)
				}
				if err := exchangeUDP(sn.client, dns, time.Second); err != nil {
					t.Errorf("%s: a to dns over UDP: %v, want an answer", f, err)
				}
				if reaches(sn.client2, web) {
					t.Errorf("%s: c to web: connected, but the server does not allow c", f)
				}
				if err := exchangeUDP(sn.client2, dns, 700*time.Millisecond); err == nil {
					t.Errorf("%s: c to dns over UDP: answered, but the server does not allow c", f)
				}
				for _, from := range []ns.NetNS{sn.client, sn.client2} {
					refusedPromptly(t, from, hostPort(svcIPNone[f], 80), hostPort(svcIPNone[f], 53))
				}
				if out, err := dialTCP(sn.node, web, 700*time.Millisecond); err == nil {
					t.Errorf("%s: the node to web answered %q: the node's own traffic is kube-proxy's, not lockstep's", f, out)
				}
			}
			if _, err := Purge(context.Background(), nsRunner{sn.node}, m); err != nil {
				t.Fatal(err)
			}
			assertClean(t, nsRunner{sn.node})
		})
	}
}

// TestPrivilegedServiceHairpin: a server reaching itself through its
// Service connects in both families: the dataplane masquerades it (the
// pod would drop a packet from its own address), and its policy judges
// it as it judges any pod of its identity.
func TestPrivilegedServiceHairpin(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			sn := newSvcNode(t)
			sn.servePorts(t)
			sn.waitServers(t)
			d, err := New(Options{Mode: m, Runner: nsRunner{sn.node}, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			want := svcTrafficState(false, 0)
			attachAll(t, d, want)
			mustApply(t, d, want)
			for _, f := range families {
				if out, err := dialTCP(sn.server, hostPort(svcIP[f], 80), time.Second); err != nil || out != "b" {
					t.Errorf("%s: b to its own Service: %q, %v; want b's answer", f, out, err)
				}
			}
			// Without the server's rule for its own identity, the same
			// connection is denied like any other.
			deny := svcTrafficState(false, 0)
			delete(deny.Endpoints["lsipt-b"].Rules, policy.RuleKey{Peer: 400, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP})
			mustApply(t, d, deny)
			if out, err := dialTCP(sn.server, hostPort(svcIP[IPv4], 80), 700*time.Millisecond); err == nil {
				t.Errorf("b to its own Service answered %q with its ingress not allowing itself", out)
			}
		})
	}
}

// Two connections from one client port to two frontends of one backend
// both answer, the first still open: their translated tuples would be
// one, and the node's conntrack gives the second another source port (the
// eBPF dataplane does so itself: TestPrivilegedServiceSourcePortClash in
// agent/datapath).
func TestPrivilegedServiceSourcePortClash(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			sn := newSvcNode(t)
			sn.servePorts(t)
			sn.waitServers(t)
			d, err := New(Options{Mode: m, Runner: nsRunner{sn.node}, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			want := svcTrafficState(false, 0)
			for _, f := range families {
				web := want.Services[policy.ServiceFrontend{Addr: addr(svcIP[f]), Port: 80, Proto: policyapi.ProtoTCP}]
				want.Services[policy.ServiceFrontend{Addr: addr(svcIP[f]), Port: 81, Proto: policyapi.ProtoTCP}] = web
			}
			attachAll(t, d, want)
			mustApply(t, d, want)
			for i, f := range families {
				port := 42000 + i
				for _, svcPort := range []int{80, 81} {
					if out, err := readFromPort(t, sn.client, port, hostPort(svcIP[f], svcPort)); err != nil || out != "b" {
						t.Errorf("%s: a from port %d to %s: %q, %v; want b's answer", f, port, hostPort(svcIP[f], svcPort), out, err)
					}
				}
			}
		})
	}
}

// readFromPort connects from port in n (SO_REUSEADDR: sockets share it)
// to addr and returns what the server wrote before closing; the socket
// stays open until the test ends.
func readFromPort(t *testing.T, n ns.NetNS, port int, addr string) (string, error) {
	d := net.Dialer{
		Timeout:   2 * time.Second,
		LocalAddr: &net.TCPAddr{Port: port},
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
	var c net.Conn
	if err := n.Do(func(ns.NetNS) (err error) {
		c, err = d.Dial("tcp", addr)
		return err
	}); err != nil {
		return "", err
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestPrivilegedServiceAffinity: with two backends a client's
// connections spread over both; with ClientIP affinity they all go where
// the first went.
func TestPrivilegedServiceAffinity(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			sn := newSvcNode(t)
			sn.servePorts(t)
			sn.waitServers(t)
			d, err := New(Options{Mode: m, Runner: nsRunner{sn.node}, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, affinity := range []time.Duration{0, time.Hour} {
				want := svcTrafficState(true, affinity)
				attachAll(t, d, want)
				mustApply(t, d, want)
				for _, f := range families {
					seen := map[string]int{}
					for range 30 {
						out, err := dialTCP(sn.client, hostPort(svcIP[f], 80), time.Second)
						if err != nil {
							t.Fatalf("%s affinity %v: a to web: %v", f, affinity, err)
						}
						seen[out]++
					}
					if affinity == 0 && (seen["b"] == 0 || seen["d"] == 0) {
						t.Errorf("%s without affinity: answers %v, want both servers", f, seen)
					}
					if affinity > 0 && len(seen) != 1 {
						t.Errorf("%s with affinity: answers %v, want one server only", f, seen)
					}
				}
			}
		})
	}
}

// kubeProxyRules are what kube-proxy in iptables mode writes for web
// (one endpoint, b) and for a Service without endpoints, in family f: the
// DNAT in nat PREROUTING and OUTPUT, and its REJECT in filter FORWARD.
func kubeProxyRules(f Family) string {
	server, none, icmp := trafficServer+":8080", svcIPNone[f], "icmp-port-unreachable"
	bits := "/32"
	if f == IPv6 {
		server, icmp, bits = "["+trafficServer6+"]:8080", "icmp6-port-unreachable", "/128"
	}
	return strings.Join([]string{
		"*nat",
		":KUBE-SERVICES - [0:0]", ":KUBE-SVC-WEB - [0:0]", ":KUBE-SEP-WEB - [0:0]",
		`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		"-A KUBE-SERVICES -d " + svcIP[f] + bits + ` -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB`,
		"-A KUBE-SVC-WEB -j KUBE-SEP-WEB",
		"-A KUBE-SEP-WEB -p tcp -j DNAT --to-destination " + server,
		"COMMIT",
		"*filter",
		":KUBE-SERVICES - [0:0]",
		`-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		"-A KUBE-SERVICES -d " + none + bits + ` -p tcp -m comment --comment "default/none has no endpoints" -m tcp --dport 80 -j REJECT --reject-with ` + icmp,
		"-A KUBE-SERVICES -d " + none + bits + ` -p udp -m comment --comment "default/none has no endpoints" -m udp --dport 53 -j REJECT --reject-with ` + icmp,
		"COMMIT", "",
	}, "\n")
}

// TestPrivilegedKubeProxyServices (Kubernetes mode: kube-proxy
// translates, with rules the test writes as kube-proxy does) proves that
// lockstep's filter chains judge Service traffic after kube-proxy's DNAT,
// on the backend: a, whose egress allows the server's pods and not the
// ClusterIP, reaches web; c, which the server does not allow, does not.
// A Service without endpoints, which kube-proxy rejects in a chain
// FORWARD reaches after lockstep's, is refused by lockstep itself, before
// a's isolated egress would drop it in silence.
func TestPrivilegedKubeProxyServices(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			sn := newSvcNode(t)
			sn.servePorts(t)
			r := nsRunner{sn.node}
			for _, f := range families {
				if _, err := r.Run(context.Background(), m.RestoreTool(f), restoreArgs, []byte(kubeProxyRules(f))); err != nil {
					t.Fatalf("write kube-proxy's rules: %v", err)
				}
			}
			sn.waitServers(t)
			for _, from := range []ns.NetNS{sn.client, sn.client2} {
				waitAnswers(t, from, hostPort(svcIP[IPv4], 80), hostPort(svcIP[IPv6], 80))
			}
			d, err := New(Options{Mode: m, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			want := svcTrafficState(false, 0)
			attachAll(t, d, want)
			mustApply(t, d, want)
			for _, f := range families {
				web := hostPort(svcIP[f], 80)
				if !reaches(sn.client, web) {
					t.Errorf("%s: a to web through kube-proxy's DNAT: no connection, want one", f)
				}
				if reaches(sn.client2, web) {
					t.Errorf("%s: c to web through kube-proxy's DNAT: connected, but the server does not allow c", f)
				}
				refusedPromptly(t, sn.client, hostPort(svcIPNone[f], 80), hostPort(svcIPNone[f], 53))
			}
			v := realView(t, r, m)
			for i := range families {
				if len(v.nat[i]) != 0 {
					t.Errorf("nat chains written in Kubernetes mode: %v", v.nat[i])
				}
			}
		})
	}
}

// TestPrivilegedServicesMatchSaveOutput applies random states with
// Services, translated, in each mode: iptables-save (filter and nat) and
// ipset save show exactly what the fake holds for the same states, so the
// nat rules are the tools' canonical form; Purge then leaves nothing.
func TestPrivilegedServicesMatchSaveOutput(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			r := nsRunner{newNetns(t)}
			opts := Options{Mode: m, Runner: r, TranslateServices: true}
			d, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(13, uint64(m)))
			states := []*policy.Desired{svcTrafficState(true, time.Hour), svcTrafficState(false, 0)}
			for range 10 {
				states = append(states, randomDesired(rng))
			}
			states = append(states, svcTrafficState(true, 0), twoPods(300))
			for i, want := range states {
				attachAll(t, d, want)
				mustApply(t, d, want)
				fresh := newFakeNode()
				opts.Runner = fresh
				f, err := New(opts)
				if err != nil {
					t.Fatal(err)
				}
				attachAll(t, f, want)
				mustApply(t, f, want)
				assertRealView(t, r, m, fresh.view(m))
				if i == 6 {
					d.Invalidate()
				}
			}
			if _, err := Purge(context.Background(), r, m); err != nil {
				t.Fatalf("Purge: %v", err)
			}
			assertClean(t, r)
		})
	}
}
