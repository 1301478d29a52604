//go:build linux

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// The flip scenario: server endpoint S is the pod side of a real veth
// (10.99.0.2, host veth atomHost attached); the client is a remote host
// (10.98.0.2) behind the node, sending UDP to S:80 through it, so only
// S's ingress hook (to_pod) decides (a client in the node's own namespace
// would prove nothing: S's ingress never blocks its node). Two pure
// states each allow that traffic, and every mix of them in which S's
// ingress is isolated denies it:
//
//	P1: client → identity 300; S ingress not isolated, no rules.
//	P2: client → identity 301; S ingress isolated, {301, ingress, UDP 80}
//	    plus atomUnrelatedRules rules that never match.
//
// Both carry atomUnrelatedAddrs addresses whose identity differs between
// them, so each flip rewrites that many ipcache entries, and P2's unrelated
// rules change ports every time, so each P2 makes a new inner map.
const (
	atomHost           = "lsat-h0"
	atomPod            = "lsat-p0"
	atomClient         = remoteV4
	atomServer         = "10.99.0.2"
	atomPort           = 80
	atomIDOld          = policyapi.Peer(300)
	atomIDNew          = policyapi.Peer(301)
	atomUnrelatedRules = 200
	atomUnrelatedAddrs = 1000
)

// atomState builds a fresh Desired for the flip scenario. clientID is the
// client address's identity; isolated and rules say what S's ingress
// enforces. n varies the unrelated entries from one call to the next.
func atomState(n int, clientID policyapi.Peer, isolated, rules bool) *policy.Desired {
	addrs := make(map[netip.Addr]policy.AddrEntry, atomUnrelatedAddrs+2)
	addrs[addr(atomServer)] = policy.AddrEntry{Identity: 400, CIDRClass: policyapi.NoCIDRClass}
	addrs[addr(atomClient)] = policy.AddrEntry{Identity: clientID, CIDRClass: policyapi.NoCIDRClass}
	for i := range atomUnrelatedAddrs {
		a := netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
		addrs[a] = policy.AddrEntry{Identity: 1000 + clientID*10 + policyapi.Peer(i%10), CIDRClass: policyapi.NoCIDRClass}
	}
	ep := &policy.EndpointPolicy{IPv4: addr(atomServer), IngressIsolated: isolated}
	if rules {
		ep.Rules = make(map[policy.RuleKey][]policy.PortRange, atomUnrelatedRules+1)
		ep.Rules[policy.RuleKey{Peer: atomIDNew, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}] = ports(atomPort, atomPort)
		for j := range atomUnrelatedRules {
			p := uint16(1000 + n%1000)
			ep.Rules[policy.RuleKey{Peer: 5000 + policyapi.Peer(j), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = ports(p, p)
		}
	}
	return &policy.Desired{
		Addrs:     addrs,
		CIDRs:     map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{atomHost: ep},
	}
}

func atomP1(n int) *policy.Desired { return atomState(n, atomIDOld, false, false) }
func atomP2(n int) *policy.Desired { return atomState(n, atomIDNew, true, true) }

// Torn states: P2's isolation with a part of P1. Each denies the client.
func atomTornIdentity(n int) *policy.Desired { return atomState(n, atomIDOld, true, true) }
func atomTornRules(n int) *policy.Desired    { return atomState(n, atomIDNew, true, false) }

// atomSetup gives a datapath enforcing P1 on S, and the client (remote)
// and pod (server) namespaces; everything goes when t ends.
func atomSetup(t *testing.T) (d *Datapath, client, pod ns.NetNS) {
	t.Helper()
	d = newTestDatapath(t)
	node, pod := newVethPair(t, atomHost, atomPod)
	client = addRemote(t, node, pod, "lsat-r0", atomPod)
	// Only IPv4 under test: no IPv6 control traffic to count.
	for _, n := range []ns.NetNS{node, pod, client} {
		if err := nodesim.Sysctl(n, "net/ipv6/conf/all/disable_ipv6", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.Do(func(ns.NetNS) error { return d.Attach(atomHost) }); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	mustApply(t, d, atomP1(0))
	// Traffic from the client crosses three fresh links: wait until a
	// datagram arrives, so that the measurements do not start with one
	// held up by neighbour resolution past its echo wait.
	for deadline := time.Now().Add(5 * time.Second); !udpDelivered(t, client, pod, fmt.Sprintf("%s:%d", atomServer, atomPort)); {
		if time.Now().After(deadline) {
			t.Fatal("no datagram from the client reaches S under P1")
		}
	}
	return d, client, pod
}

// echoServer listens on S:80 in pod, echoes every datagram and records
// the distinct sequence numbers it received.
type echoServer struct {
	conn net.PacketConn
	done chan struct{}
	mu   sync.Mutex
	seen map[uint64]bool
}

func startEchoServer(t *testing.T, pod ns.NetNS) *echoServer {
	t.Helper()
	s := &echoServer{done: make(chan struct{}), seen: map[uint64]bool{}}
	dst := fmt.Sprintf("%s:%d", atomServer, atomPort)
	if err := pod.Do(func(ns.NetNS) (err error) {
		s.conn, err = net.ListenPacket("udp4", dst)
		return err
	}); err != nil {
		t.Fatalf("listen on %s: %v", dst, err)
	}
	go func() {
		defer close(s.done)
		buf := make([]byte, 64)
		for {
			n, from, err := s.conn.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if n != 8 {
				continue
			}
			s.mu.Lock()
			s.seen[binary.BigEndian.Uint64(buf)] = true
			s.mu.Unlock()
			s.conn.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *echoServer) stop() {
	s.conn.Close()
	<-s.done
}

func (s *echoServer) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// flipTraffic is what one run of runFlipTraffic saw.
type flipTraffic struct {
	sent, echoed, received int
	flips                  uint32 // generations flipped during traffic
	ingressDrops           uint64 // growth of the policy-ingress counter
	elapsed                time.Duration
}

// flipRun says how long runFlipTraffic goes on: until it has sent
// minPackets datagrams and seen minFlips Apply calls, or maxLost datagrams
// went unanswered within echoWait, or maxTime passed.
type flipRun struct {
	minPackets int
	minFlips   int64
	maxLost    int
	echoWait   time.Duration
	maxTime    time.Duration
}

// Source ports of runFlipTraffic's datagrams: one per datagram, below the
// ephemeral range, never reused within a run.
const (
	atomFirstPort = 10000
	atomLastPort  = 32000
)

// runFlipTraffic applies states(1), states(2), ... as fast as it can (at
// most once per RCU grace period, see waitQuiescent) while
// the client sends datagrams to S:80, each from a fresh socket on its own
// source port so that conntrack never decides in place of the policy. Each
// datagram waits for its echo (or run.echoWait) before the next, so the
// server's receive buffer never overflows.
func runFlipTraffic(t *testing.T, d *Datapath, client ns.NetNS, srv *echoServer, states func(n int) *policy.Desired, run flipRun) flipTraffic {
	t.Helper()
	var res flipTraffic
	before := counter(t, d, bpfmaps.ReasonPolicyIngress)

	var applied atomic.Int64
	stop := make(chan struct{})
	flipErr := make(chan error, 1)
	go func() {
		for n := 1; ; n++ {
			select {
			case <-stop:
				flipErr <- nil
				return
			default:
			}
			if err := d.Apply(states(n)); err != nil {
				flipErr <- fmt.Errorf("Apply #%d: %w", n, err)
				return
			}
			applied.Add(1)
		}
	}()
	stopped := false
	stopFlipper := func() error {
		if stopped {
			return nil
		}
		stopped = true
		close(stop)
		return <-flipErr
	}
	defer stopFlipper()

	gen0 := d.Generation()
	start := time.Now()
	err := client.Do(func(ns.NetNS) error {
		server := &net.UDPAddr{IP: net.ParseIP(atomServer), Port: atomPort}
		buf := make([]byte, 64)
		for seq := 0; atomFirstPort+seq <= atomLastPort; seq++ {
			if res.sent >= run.minPackets && applied.Load() >= run.minFlips ||
				res.sent-res.echoed >= run.maxLost || time.Since(start) > run.maxTime {
				break
			}
			// Spread the datagrams over the flips: Apply flips at most
			// once per RCU grace period, so while flips lag behind their
			// share, wait for the next one rather than spend source ports.
			for int64(res.sent)*run.minFlips > applied.Load()*int64(run.minPackets) && time.Since(start) < run.maxTime {
				time.Sleep(200 * time.Microsecond)
			}
			local := &net.UDPAddr{IP: net.ParseIP(atomClient), Port: atomFirstPort + seq}
			c, err := net.DialUDP("udp4", local, server)
			if err != nil {
				return fmt.Errorf("socket for datagram %d: %w", seq, err)
			}
			var msg [8]byte
			binary.BigEndian.PutUint64(msg[:], uint64(seq))
			if _, err := c.Write(msg[:]); err != nil {
				c.Close()
				return fmt.Errorf("send datagram %d: %w", seq, err)
			}
			res.sent++
			c.SetReadDeadline(time.Now().Add(run.echoWait))
			n, err := c.Read(buf)
			c.Close()
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
			case err != nil:
				return fmt.Errorf("echo of datagram %d: %w", seq, err)
			case n == 8 && binary.BigEndian.Uint64(buf) == uint64(seq):
				res.echoed++
			}
		}
		return nil
	})
	res.elapsed = time.Since(start)
	res.flips = d.Generation() - gen0
	if ferr := stopFlipper(); ferr != nil {
		t.Fatalf("flipper: %v", ferr)
	}
	if err != nil {
		t.Fatalf("traffic: %v", err)
	}
	// An unanswered datagram may still be on its way: give it a moment.
	for deadline := time.Now().Add(200 * time.Millisecond); srv.received() < res.sent && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.received = srv.received()
	res.ingressDrops = counter(t, d, bpfmaps.ReasonPolicyIngress) - before
	t.Logf("%d flips during %v of traffic: sent %d, echoed %d, received %d, policy-ingress drops %d",
		res.flips, res.elapsed.Round(time.Millisecond), res.sent, res.echoed, res.received, res.ingressDrops)
	return res
}

// A policy flipped back and forth while traffic runs: every packet saw
// either the old or the new policy, never a mix. Any mix that isolates
// S's ingress denies the client, so one dropped datagram would prove a
// packet read a torn state.
//
// Only S's ingress hook is tested: a packet crossing two endpoints' hooks
// reads gen once in each, and may legitimately see the old state at one
// and the new at the other.
func TestPrivilegedPolicyFlipIsAtomicUnderTraffic(t *testing.T) {
	testenv.Privileged(t)
	d, client, pod := atomSetup(t)
	srv := startEchoServer(t, pod)

	states := func(n int) *policy.Desired {
		if n%2 == 1 {
			return atomP2(n)
		}
		return atomP1(n)
	}
	res := runFlipTraffic(t, d, client, srv, states, flipRun{
		minPackets: 3000, minFlips: 300, maxLost: 1, echoWait: time.Second, maxTime: 15 * time.Second,
	})

	if res.flips < 100 {
		t.Errorf("only %d flips during traffic: too few for the test to mean anything", res.flips)
	}
	if res.received != res.sent || res.echoed != res.sent {
		t.Errorf("sent %d datagrams, server received %d, %d echoed: a packet saw a torn policy", res.sent, res.received, res.echoed)
	}
	if res.ingressDrops != 0 {
		t.Errorf("policy-ingress counter grew by %d during the flips, want 0", res.ingressDrops)
	}
}

// The checks of the flip test see a torn state when there is one: each
// torn mix drops the client's datagram, and flipping through torn states
// under traffic shows up as lost datagrams and policy-ingress drops.
func TestPrivilegedAtomicityCheckDetectsTornState(t *testing.T) {
	testenv.Privileged(t)
	d, client, pod := atomSetup(t)

	for _, tc := range []struct {
		name  string
		state func(int) *policy.Desired
		want  bool
	}{
		{"P1", atomP1, true},
		{"P2", atomP2, true},
		{"P2 isolation, P1 identity", atomTornIdentity, false},
		{"P2 isolation and identity, P1's empty rules", atomTornRules, false},
	} {
		mustApply(t, d, tc.state(0))
		d.flushCT(t)
		before := counter(t, d, bpfmaps.ReasonPolicyIngress)
		got := udpDelivered(t, client, pod, fmt.Sprintf("%s:%d", atomServer, atomPort))
		drops := counter(t, d, bpfmaps.ReasonPolicyIngress) - before
		if got != tc.want || (drops == 0) != tc.want {
			t.Errorf("%s: delivered=%v with %d policy-ingress drops, want delivered=%v", tc.name, got, drops, tc.want)
		}
	}
	srv := startEchoServer(t, pod) // after udpDelivered's own listeners

	// P1, torn, P2, torn, ...: half the time a torn state is live.
	states := func(n int) *policy.Desired {
		switch n % 4 {
		case 0:
			return atomP1(n)
		case 1:
			return atomTornIdentity(n)
		case 2:
			return atomP2(n)
		}
		return atomTornRules(n)
	}
	mustApply(t, d, atomP1(0))
	res := runFlipTraffic(t, d, client, srv, states, flipRun{
		minPackets: 3000, minFlips: 300, maxLost: 20, echoWait: 20 * time.Millisecond, maxTime: 15 * time.Second,
	})
	if res.received == res.sent || res.ingressDrops == 0 {
		t.Errorf("flipping through torn states: sent %d, received %d, %d policy-ingress drops; want losses and drops", res.sent, res.received, res.ingressDrops)
	}
	if lost := uint64(res.sent - res.received); res.ingressDrops != lost {
		t.Errorf("%d datagrams lost but the policy-ingress counter grew by %d: the two detectors disagree", lost, res.ingressDrops)
	}
}
