//go:build linux

package datapath

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// The traffic scenario: on one node, client pod C (10.99.0.2, fd99::2,
// identity 500) and backend pod B (10.99.0.3, fd99::3, identity 501),
// both isolated both ways. C's egress allows 501 on TCP and UDP 8080 (and
// UDP 8081), B's ingress allows 500 there, nothing else. Frontends:
//
//	web   10.96.0.10 / fd00:96::10, TCP and UDP 80 → B:8080
//	self  10.96.0.13 / fd00:96::13, TCP and UDP 80 → C:8080 (hairpin)
//	empty 10.96.0.12 / fd00:96::12, TCP and UDP 80, no backend
//	closed 10.96.0.15 / fd00:96::15, UDP 80 → B:8081, where nothing listens
//
// No kube-proxy runs on the node: a ClusterIP works only as lockstep
// translates it.
const (
	trClient4, trClient6   = "10.99.0.2", "fd99::2"
	trBackend4, trBackend6 = "10.99.0.3", "fd99::3"
	trHostC, trHostB       = "lssv-c", "lssv-b"
	idClient, idBackend    = policyapi.Peer(500), policyapi.Peer(501)
	svcClosed4, svcClosed6 = "10.96.0.15", "fd00:96::15"
)

func trState(services bool, backendIngress bool) *policy.Desired {
	tcp, udp := policyapi.ProtoTCP, policyapi.ProtoUDP
	rule := func(peer policyapi.Peer, dir policyapi.Direction, proto uint8) policy.RuleKey {
		return policy.RuleKey{Peer: peer, Dir: dir, Proto: proto}
	}
	c := &policy.EndpointPolicy{IPv4: addr(trClient4), IPv6: addr(trClient6), IngressIsolated: true, EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{
			rule(idBackend, policyapi.Egress, tcp): ports(8080, 8080),
			rule(idBackend, policyapi.Egress, udp): ports(8080, 8081),
			// Hairpin: C reaches itself on 8080.
			rule(idClient, policyapi.Egress, tcp):  ports(8080, 8080),
			rule(idClient, policyapi.Egress, udp):  ports(8080, 8080),
			rule(idClient, policyapi.Ingress, tcp): ports(8080, 8080),
			rule(idClient, policyapi.Ingress, udp): ports(8080, 8080),
		}}
	b := &policy.EndpointPolicy{IPv4: addr(trBackend4), IPv6: addr(trBackend6), IngressIsolated: true, EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{}}
	if backendIngress {
		b.Rules[rule(idClient, policyapi.Ingress, tcp)] = ports(8080, 8080)
		b.Rules[rule(idClient, policyapi.Ingress, udp)] = ports(8080, 8081)
	}
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr(trClient4):  {Identity: idClient, CIDRClass: policyapi.NoCIDRClass},
			addr(trClient6):  {Identity: idClient, CIDRClass: policyapi.NoCIDRClass},
			addr(trBackend4): {Identity: idBackend, CIDRClass: policyapi.NoCIDRClass},
			addr(trBackend6): {Identity: idBackend, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs:     map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{trHostC: c, trHostB: b},
	}
	if !services {
		return d
	}
	d.Services = map[policy.ServiceFrontend]*policy.ServiceEntry{}
	for _, proto := range []uint8{tcp, udp} {
		d.Services[frontend(svcWeb4, proto, 80)] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(8080, trBackend4)}
		d.Services[frontend(svcWeb6, proto, 80)] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(8080, trBackend6)}
		d.Services[frontend(svcSelf4, proto, 80)] = &policy.ServiceEntry{Service: "ns/self", Backends: backends(8080, trClient4)}
		d.Services[frontend(svcSelf6, proto, 80)] = &policy.ServiceEntry{Service: "ns/self", Backends: backends(8080, trClient6)}
		d.Services[frontend(svcEmpty4, proto, 80)] = &policy.ServiceEntry{Service: "ns/empty"}
		d.Services[frontend(svcEmpty6, proto, 80)] = &policy.ServiceEntry{Service: "ns/empty"}
	}
	d.Services[frontend(svcClosed4, udp, 80)] = &policy.ServiceEntry{Service: "ns/closed", Backends: backends(8081, trBackend4)}
	d.Services[frontend(svcClosed6, udp, 80)] = &policy.ServiceEntry{Service: "ns/closed", Backends: backends(8081, trBackend6)}
	return d
}

// trSetup builds the traffic scenario's node and pods, with who-am-I
// servers on C:8080 and B:8080 (TCP and UDP), and applies state.
func trSetup(t *testing.T, state *policy.Desired) (*podNode, podNet, podNet) {
	t.Helper()
	n := newPodNode(t)
	c := n.addPod(t, trHostC, trClient4, trClient6, true)
	b := n.addPod(t, trHostB, trBackend4, trBackend6, true)
	for _, a := range []string{trClient4, "[" + trClient6 + "]"} {
		serveWhoAmI(t, c.ns, a+":8080")
	}
	for _, a := range []string{trBackend4, "[" + trBackend6 + "]"} {
		serveWhoAmI(t, b.ns, a+":8080")
	}
	mustApply(t, n.d, state)
	return n, c, b
}

func hostPort(a string, port string) string { return net.JoinHostPort(a, port) }

// Real TCP and UDP from a pod through a ClusterIP reach the backend, both
// families: translated before the client's egress policy, which allows
// the backend and not the ClusterIP, judged again by the backend's
// ingress, which sees the client's own address, and translated back, so
// the client talks to the frontend throughout. Without the Service, or
// without the backend's ingress rule, nothing passes.
func TestPrivilegedServiceTraffic(t *testing.T) {
	testenv.Privileged(t)
	n, c, _ := trSetup(t, trState(false, true))
	// The network works, and policy allows the backend, without Services.
	for _, a := range []string{trBackend4, trBackend6} {
		if _, err := waitFor(func() (string, error) { return askTCP(c.ns, hostPort(a, "8080"), time.Second) }, 5*time.Second); err != nil {
			t.Fatalf("C to B %s:8080 directly: %v", a, err)
		}
	}
	for _, fe := range []string{svcWeb4, svcWeb6} {
		if reply, err := askTCP(c.ns, hostPort(fe, "80"), 500*time.Millisecond); err == nil {
			t.Fatalf("TCP to %s:80 with no Service translated: answered %q", fe, reply)
		}
	}

	mustApply(t, n.d, trState(true, true))
	frontendsAnswer(t, c)

	mustApply(t, n.d, trState(true, false))
	before := counter(t, n.d, bpfmaps.ReasonPolicyIngress)
	for _, fe := range []string{svcWeb4, svcWeb6} {
		if reply, err := askTCP(c.ns, hostPort(fe, "80"), 500*time.Millisecond); err == nil {
			t.Errorf("TCP to %s:80 without B's ingress rule: answered %q", fe, reply)
		}
	}
	if got := counter(t, n.d, bpfmaps.ReasonPolicyIngress) - before; got == 0 {
		t.Errorf("policy-ingress did not grow: B's ingress did not judge the translated connection")
	}
}

// A pod reaches itself through its own Service, over TCP and UDP, both
// families: it sees the connection come from the frontend's address.
func TestPrivilegedServiceHairpinTraffic(t *testing.T) {
	testenv.Privileged(t)
	_, c, _ := trSetup(t, trState(true, true))
	for _, fe := range []string{svcSelf4, svcSelf6} {
		for _, proto := range []string{"tcp", "udp"} {
			ask := askTCP
			if proto == "udp" {
				ask = askUDP
			}
			reply, err := waitFor(func() (string, error) { return ask(c.ns, hostPort(fe, "80"), time.Second) }, 3*time.Second)
			if err != nil {
				t.Errorf("%s from C to its own Service %s:80: %v", proto, fe, err)
				continue
			}
			if ap, perr := netip.ParseAddrPort(reply); perr != nil || ap.Addr() != addr(fe) {
				t.Errorf("%s to %s:80: C's server saw %q, want the frontend's address", proto, fe, reply)
			}
		}
	}
}

// A Service without a ready backend refuses at once, as under
// kube-proxy: connect() fails with ECONNREFUSED, a UDP socket gets the
// ICMP error as ECONNREFUSED.
func TestPrivilegedServiceNoBackendTraffic(t *testing.T) {
	testenv.Privileged(t)
	n, c, _ := trSetup(t, trState(true, true))
	// The pod's link is up and its neighbours resolved.
	if _, err := waitFor(func() (string, error) { return askTCP(c.ns, hostPort(svcWeb4, "80"), time.Second) }, 5*time.Second); err != nil {
		t.Fatalf("the scenario does not pass traffic: %v", err)
	}
	before := counter(t, n.d, bpfmaps.ReasonServiceNoBackend)
	for _, fe := range []string{svcEmpty4, svcEmpty6} {
		for _, proto := range []string{"tcp", "udp"} {
			ask := askTCP
			if proto == "udp" {
				ask = askUDP
			}
			start := time.Now()
			_, err := ask(c.ns, hostPort(fe, "80"), 3*time.Second)
			took := time.Since(start)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s to %s:80, no backend: %v, want ECONNREFUSED (timed out: %v)", proto, fe, err, errTimeout(err))
				continue
			}
			if took > time.Second {
				t.Errorf("%s to %s:80, no backend: refused after %v, want at once", proto, fe, took)
			}
		}
	}
	if got := counter(t, n.d, bpfmaps.ReasonServiceNoBackend) - before; got < 4 {
		t.Errorf("service-no-backend grew by %d, want at least 4", got)
	}
}

// A datagram through a Service to a backend port where nothing listens:
// the backend's kernel answers with a port unreachable, translated on its
// way to the client, whose socket gets ECONNREFUSED as under kube-proxy.
func TestPrivilegedServiceBackendUnreachableTraffic(t *testing.T) {
	testenv.Privileged(t)
	_, c, _ := trSetup(t, trState(true, true))
	if _, err := waitFor(func() (string, error) { return askUDP(c.ns, hostPort(svcWeb4, "80"), time.Second) }, 5*time.Second); err != nil {
		t.Fatalf("the scenario does not pass traffic: %v", err)
	}
	for _, fe := range []string{svcClosed4, svcClosed6} {
		_, err := waitFor(func() (string, error) {
			_, err := askUDP(c.ns, hostPort(fe, "80"), time.Second)
			if errTimeout(err) {
				return "", err // a neighbour still resolving: again
			}
			return "", nil
		}, 3*time.Second)
		if err != nil {
			t.Errorf("UDP to %s:80: %v, want an answer or a refusal", fe, err)
			continue
		}
		if _, err := askUDP(c.ns, hostPort(fe, "80"), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to %s:80, nothing listening on the backend: %v, want ECONNREFUSED", fe, err)
		}
	}
}

// frontendsAnswer checks that the client c reaches the web Service's
// frontends, IPv4 and IPv6, over TCP and UDP, and that the backend sees
// the client's own address.
func frontendsAnswer(t *testing.T, c podNet) {
	t.Helper()
	for _, fam := range []struct{ fe, client string }{{svcWeb4, trClient4}, {svcWeb6, trClient6}} {
		for _, proto := range []string{"tcp", "udp"} {
			ask := askTCP
			if proto == "udp" {
				ask = askUDP
			}
			reply, err := waitFor(func() (string, error) { return ask(c.ns, hostPort(fam.fe, "80"), time.Second) }, 3*time.Second)
			if err != nil {
				t.Errorf("%s to %s:80: %v", proto, fam.fe, err)
				continue
			}
			if ap, perr := netip.ParseAddrPort(reply); perr != nil || ap.Addr() != addr(fam.client) {
				t.Errorf("%s to %s:80: the backend saw %q, want the client's own address %s", proto, fam.fe, reply, fam.client)
			}
		}
	}
}
