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
	"lockstep.dev/lockstep/test/testenv"
)

// The Service flip scenario: client pod C (10.99.0.2, attached, isolated
// both ways) sends UDP datagrams to frontend F (10.96.0.10:80), each from
// a fresh source port, so each is a new connection that is translated and
// judged anew. Two pure states:
//
//	S1: F → B1 (10.99.0.3:8080, identity 601); C's egress allows 601 only
//	S2: F → B2 (10.99.0.4:8080, identity 602); C's egress allows 602 only
//
// A packet that saw S1's backends with S2's policy, or the reverse, is
// dropped by C's egress (policy-egress) and its datagram is lost. Every
// Apply also rewrites flipUnrelated frontends' backends and as many
// addresses' identities, so that each flip writes hundreds of entries
// between the idle parity's first write and the generation flip.
const (
	flipB1, flipB2         = "10.99.0.3", "10.99.0.4"
	flipID1, flipID2       = policyapi.Peer(601), policyapi.Peer(602)
	flipUnrelated          = 300
	flipFirst, flipLast    = 10000, 32000 // source ports, one per datagram
	flipHostC              = "lsfl-c"
	flipHostB1, flipHostB2 = "lsfl-b1", "lsfl-b2"
)

// flipState is S1 (backend 1) or S2 (backend 2), or a torn mix: the
// backends of one with the egress rule of the other.
func flipState(n int, backend, allowed int) *policy.Desired {
	ids := map[int]policyapi.Peer{1: flipID1, 2: flipID2}
	bs := map[int]string{1: flipB1, 2: flipB2}
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr(trClient4): {Identity: idClient, CIDRClass: policyapi.NoCIDRClass},
			addr(flipB1):    {Identity: flipID1, CIDRClass: policyapi.NoCIDRClass},
			addr(flipB2):    {Identity: flipID2, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{flipHostC: {
			IPv4: addr(trClient4), IPv6: addr(trClient6), IngressIsolated: true, EgressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: ids[allowed], Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}: ports(8080, 8080),
			},
		}},
		Services: map[policy.ServiceFrontend]*policy.ServiceEntry{
			frontend(svcWeb4, policyapi.ProtoUDP, 80): {Service: "ns/flip", Backends: backends(8080, bs[backend])},
		},
	}
	for i := range flipUnrelated {
		a := netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
		d.Addrs[a] = policy.AddrEntry{Identity: 1000 + policyapi.Peer(n%7), CIDRClass: policyapi.NoCIDRClass}
		fe := policy.ServiceFrontend{Addr: netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}), Port: 80, Proto: policyapi.ProtoTCP}
		d.Services[fe] = &policy.ServiceEntry{Backends: []policy.ServiceBackend{{Addr: a, Port: uint16(1000 + n%1000)}}}
	}
	return d
}

// flipEcho answers every 8-byte datagram on addr in n with itself, and
// records its sequence number in seen.
func flipEcho(t *testing.T, n ns.NetNS, addr string, seen *seqSet) {
	t.Helper()
	var pc net.PacketConn
	if err := n.Do(func(ns.NetNS) (err error) {
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if k == 8 {
				seen.add(binary.BigEndian.Uint64(buf))
			}
			pc.WriteTo(buf[:k], from)
		}
	}()
}

// seqSet is the set of sequence numbers the backends received.
type seqSet struct {
	mu   sync.Mutex
	seqs map[uint64]bool
}

func (s *seqSet) add(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seqs == nil {
		s.seqs = map[uint64]bool{}
	}
	s.seqs[seq] = true
}

func (s *seqSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seqs)
}

func flipSetup(t *testing.T) (*podNode, podNet, *seqSet) {
	t.Helper()
	n := newPodNode(t)
	c := n.addPod(t, flipHostC, trClient4, trClient6, true)
	b1 := n.addPod(t, flipHostB1, flipB1, "fd99::3", false)
	b2 := n.addPod(t, flipHostB2, flipB2, "fd99::4", false)
	seen := &seqSet{}
	flipEcho(t, b1.ns, flipB1+":8080", seen)
	flipEcho(t, b2.ns, flipB2+":8080", seen)
	mustApply(t, n.d, flipState(0, 1, 1))
	if _, err := waitFor(func() (string, error) { return askUDP(c.ns, svcWeb4+":80", time.Second) }, 5*time.Second); err != nil {
		t.Fatalf("no echo through F under S1: %v", err)
	}
	mustApply(t, n.d, flipState(0, 2, 2))
	if _, err := waitFor(func() (string, error) { return askUDP(c.ns, svcWeb4+":80", time.Second) }, 5*time.Second); err != nil {
		t.Fatalf("no echo through F under S2: %v", err)
	}
	return n, c, seen
}

// svcFlipResult is what one run of runServiceFlips saw.
type svcFlipResult struct {
	sent, echoed int
	received     int // by the backends
	flips        uint32
	egressDrops  uint64
}

// runServiceFlips applies states(1), states(2), ... as fast as Apply
// allows while C sends datagrams to F, each from its own source port and
// waiting for its echo (or echoWait), until minPackets were sent and
// minFlips applied, or maxLost went unanswered, or maxTime passed.
func runServiceFlips(t *testing.T, n *podNode, c podNet, seen *seqSet, states func(int) *policy.Desired, minPackets int, minFlips int64, maxLost int, echoWait, maxTime time.Duration) svcFlipResult {
	t.Helper()
	var res svcFlipResult
	seen0 := seen.len()
	before := counter(t, n.d, bpfmaps.ReasonPolicyEgress)
	var applied atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var flipErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := n.d.Apply(states(k)); err != nil {
				flipErr = fmt.Errorf("Apply #%d: %w", k, err)
				return
			}
			applied.Add(1)
		}
	}()
	gen0 := n.d.Generation()
	start := time.Now()
	err := c.ns.Do(func(ns.NetNS) error {
		fe := &net.UDPAddr{IP: net.ParseIP(svcWeb4), Port: 80}
		buf := make([]byte, 64)
		for seq := 0; flipFirst+seq <= flipLast; seq++ {
			if res.sent >= minPackets && applied.Load() >= minFlips || res.sent-res.echoed >= maxLost || time.Since(start) > maxTime {
				return nil
			}
			// Spread the datagrams over the flips.
			for int64(res.sent)*minFlips > applied.Load()*int64(minPackets) && time.Since(start) < maxTime {
				time.Sleep(200 * time.Microsecond)
			}
			conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(trClient4), Port: flipFirst + seq}, fe)
			if err != nil {
				return fmt.Errorf("socket for datagram %d: %w", seq, err)
			}
			var msg [8]byte
			binary.BigEndian.PutUint64(msg[:], uint64(seq))
			if _, err := conn.Write(msg[:]); err != nil {
				conn.Close()
				return fmt.Errorf("send datagram %d: %w", seq, err)
			}
			res.sent++
			conn.SetReadDeadline(time.Now().Add(echoWait))
			k, err := conn.Read(buf)
			conn.Close()
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
			case err != nil:
				return fmt.Errorf("echo of datagram %d: %w", seq, err)
			case k == 8 && binary.BigEndian.Uint64(buf) == uint64(seq):
				res.echoed++
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if flipErr != nil {
		t.Fatal(flipErr)
	}
	if err != nil {
		t.Fatalf("traffic: %v", err)
	}
	res.flips = n.d.Generation() - gen0
	// A datagram not echoed in time may still be on its way.
	for deadline := time.Now().Add(300 * time.Millisecond); seen.len()-seen0 < res.sent && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.received = seen.len() - seen0
	res.egressDrops = counter(t, n.d, bpfmaps.ReasonPolicyEgress) - before
	t.Logf("%d flips in %v: sent %d, echoed %d, received %d, policy-egress drops %d", res.flips, time.Since(start).Round(time.Millisecond), res.sent, res.echoed, res.received, res.egressDrops)
	return res
}

// A Service's backends and the policy that allows them change in one
// Apply, back and forth, while a client opens connections through the
// Service: every packet saw the backends and the policy of one state,
// never the backends of one with the policy of the other (which C's
// egress would drop).
func TestPrivilegedServiceFlipIsAtomicUnderTraffic(t *testing.T) {
	testenv.Privileged(t)
	n, c, seen := flipSetup(t)
	states := func(k int) *policy.Desired {
		if k%2 == 1 {
			return flipState(k, 1, 1)
		}
		return flipState(k, 2, 2)
	}
	res := runServiceFlips(t, n, c, seen, states, 3000, 300, 1, time.Second, 20*time.Second)
	if res.flips < 100 {
		t.Errorf("only %d flips during traffic: too few for the test to mean anything", res.flips)
	}
	if res.echoed != res.sent || res.received != res.sent {
		t.Errorf("sent %d datagrams, the backends received %d, %d echoed: a packet saw one state's backends with the other's policy", res.sent, res.received, res.echoed)
	}
	if res.egressDrops != 0 {
		t.Errorf("policy-egress grew by %d during the flips, want 0", res.egressDrops)
	}
}

// The flip test sees a torn state when there is one: each mix of one
// state's backends with the other's policy drops the client's datagram,
// and flipping through them under traffic shows as losses and
// policy-egress drops, as many of one as of the other.
func TestPrivilegedServiceFlipDetectsTornState(t *testing.T) {
	testenv.Privileged(t)
	n, c, seen := flipSetup(t)
	for _, tc := range []struct {
		name             string
		backend, allowed int
	}{{"S1's backends, S2's policy", 1, 2}, {"S2's backends, S1's policy", 2, 1}} {
		mustApply(t, n.d, flipState(0, tc.backend, tc.allowed))
		if reply, err := askUDP(c.ns, svcWeb4+":80", 300*time.Millisecond); err == nil {
			t.Errorf("%s: echoed %q, want nothing", tc.name, reply)
		}
	}
	states := func(k int) *policy.Desired {
		switch k % 4 {
		case 0:
			return flipState(k, 1, 1)
		case 1:
			return flipState(k, 1, 2)
		case 2:
			return flipState(k, 2, 2)
		}
		return flipState(k, 2, 1)
	}
	mustApply(t, n.d, flipState(0, 1, 1))
	res := runServiceFlips(t, n, c, seen, states, 3000, 300, 20, 20*time.Millisecond, 20*time.Second)
	if res.received == res.sent || res.egressDrops == 0 {
		t.Errorf("flipping through torn states: sent %d, the backends received %d, %d policy-egress drops; want losses and drops", res.sent, res.received, res.egressDrops)
	}
	if lost := uint64(res.sent - res.received); res.egressDrops != lost {
		t.Errorf("%d datagrams lost but policy-egress grew by %d: the two detectors disagree", lost, res.egressDrops)
	}
}
