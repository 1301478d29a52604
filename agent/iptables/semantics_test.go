package iptables

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The address space of the random states: pods, nested ipBlocks and
// excepts, default routes that are classes themselves.
var (
	semPrefixes = []string{
		"10.0.0.0/8", "10.0.0.0/16", "10.0.1.0/24", "10.0.1.0/28", "10.0.1.4/30", "10.0.2.0/24",
		"10.0.2.5/32", "0.0.0.0/1", "128.0.0.0/1", "192.168.0.0/16", "192.168.1.0/24",
		"fd00::/8", "fd00::/64", "fd00::10/124", "8000::/1", "fe80::/10",
	}
	semExtraAddrs = []string{
		"10.9.9.9", "10.0.1.3", "10.0.1.5", "10.0.2.5", "11.1.1.1", "192.168.1.1", "192.168.2.2", "200.1.1.1",
		"fd00::99", "fd00::1:1", "fd01::1", "2001:db8::1", "fe80::1", "::",
	}
	semClasses = []policyapi.Peer{policyapi.NoCIDRClass, policyapi.CIDRClassBit | 1, policyapi.CIDRClassBit | 2, policyapi.CIDRClassBit | 3}
	semIfs     = []string{"ep0", "ep1", "ep2"}
	// semFrontends are the ClusterIPs, outside every prefix above.
	semFrontends = []string{"10.96.0.1", "10.96.0.2", "fd96::1"}
)

// randomDesired builds a random but well-formed Desired.
func randomDesired(rng *rand.Rand) *policy.Desired {
	pick := func(p []policyapi.Peer) policyapi.Peer { return p[rng.IntN(len(p))] }
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{},
		CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
	}
	if rng.IntN(4) == 0 {
		d.CIDRs[prefix("0.0.0.0/0")] = pick(semClasses)
		d.CIDRs[prefix("::/0")] = pick(semClasses)
	}
	for _, p := range semPrefixes {
		if rng.IntN(2) == 0 {
			d.CIDRs[prefix(p)] = pick(semClasses)
		}
	}
	idx := newCIDRIndex(d.CIDRs)
	ids := []policyapi.Peer{300, 301, 302, 303}
	for i := range 12 {
		var a netip.Addr
		if i%3 == 2 {
			a = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(i)})
		} else {
			a = netip.AddrFrom4([4]byte{10, 0, byte(i % 3), byte(i)})
		}
		class := idx.lookup(a)
		if rng.IntN(6) == 0 {
			class = pick(semClasses) // a pod the compiler classed differently
		}
		d.Addrs[a] = policy.AddrEntry{Identity: pick(ids), CIDRClass: class}
	}
	pods := slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for a := range d.Addrs {
			if !yield(a) {
				return
			}
		}
	}, netip.Addr.Compare)
	peers := append([]policyapi.Peer{policyapi.PeerAny, policyapi.PeerWorld, 7}, ids...)
	peers = append(peers, semClasses...)
	d.Endpoints = map[string]*policy.EndpointPolicy{}
	for i, name := range semIfs {
		ep := &policy.EndpointPolicy{
			IngressIsolated: rng.IntN(3) > 0, EgressIsolated: rng.IntN(3) > 0,
			Rules: map[policy.RuleKey][]policy.PortRange{},
		}
		if rng.IntN(5) > 0 {
			ep.IPv4 = pods[i]
		}
		if rng.IntN(5) > 0 {
			ep.IPv6 = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(2 + 3*i)})
		}
		for range rng.IntN(10) {
			k := policy.RuleKey{Peer: pick(peers), Dir: policyapi.Direction(rng.IntN(2)), Proto: []uint8{6, 17, 132, 0}[rng.IntN(4)]}
			ep.Rules[k] = randomRanges(rng)
		}
		d.Endpoints[name] = ep
	}
	d.Services = randomServices(rng, d)
	return d
}

// randomServices gives some states up to four frontends of random
// protocols and ports, with none to three backends among the pods of
// their family (the endpoints' own addresses included: hairpin), some
// with ClientIP affinity.
func randomServices(rng *rand.Rand, d *policy.Desired) map[policy.ServiceFrontend]*policy.ServiceEntry {
	if rng.IntN(4) == 0 {
		return nil
	}
	out := map[policy.ServiceFrontend]*policy.ServiceEntry{}
	for i := range 1 + rng.IntN(4) {
		fr := policy.ServiceFrontend{Addr: addr(semFrontends[rng.IntN(len(semFrontends))]), Port: uint16(1 + rng.IntN(200)), Proto: []uint8{6, 17, 132}[rng.IntN(3)]}
		var pods []netip.Addr
		for a := range d.Addrs {
			if a.Is4() == fr.Addr.Is4() {
				pods = append(pods, a)
			}
		}
		slices.SortFunc(pods, netip.Addr.Compare)
		e := &policy.ServiceEntry{Service: fmt.Sprintf("ns/svc-%d", i)}
		// Half the SCTP frontends have their backends on the Service
		// port: the only SCTP frontends the eBPF programs translate.
		samePort := fr.Proto == policyapi.ProtoSCTP && rng.IntN(2) == 0
		for range rng.IntN(4) {
			b := policy.ServiceBackend{Addr: pods[rng.IntN(len(pods))], Port: uint16(1 + rng.IntN(200))}
			if samePort {
				b.Port = fr.Port
			}
			if !slices.Contains(e.Backends, b) {
				e.Backends = append(e.Backends, b)
			}
		}
		slices.SortFunc(e.Backends, func(a, b policy.ServiceBackend) int {
			return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
		})
		if rng.IntN(3) == 0 {
			e.AffinityTimeout = policyapi.DefaultAffinityTimeout
		}
		out[fr] = e
	}
	return out
}

// randomRanges returns sorted, disjoint, non-adjacent ranges in 1..200,
// sometimes more than one multiport match holds, sometimes every port.
func randomRanges(rng *rand.Rand) []policy.PortRange {
	if rng.IntN(4) == 0 {
		return ports(0, 65535)
	}
	var out []policy.PortRange
	for p := uint16(1 + rng.IntN(10)); p < 200 && len(out) < policy.MaxPortRanges; p += uint16(2 + rng.IntN(20)) {
		hi := p + uint16(rng.IntN(3))*uint16(rng.IntN(4))
		out = append(out, policy.PortRange{Lo: p, Hi: hi})
		p = hi
	}
	return out
}

// randomPacket builds a packet at a random hook between endpoints,
// remotes and the node, sometimes spoofed; one in three is to a frontend
// when its family has one.
func randomPacket(rng *rand.Rand, d *policy.Desired) testPacket { return randomPacketOf(rng, d, 3) }

// randomPacketOf is randomPacket with one in frontendOneIn packets to a
// frontend.
func randomPacketOf(rng *rand.Rand, d *policy.Desired, frontendOneIn int) testPacket {
	v6 := rng.IntN(3) == 0
	var pool []netip.Addr
	for a := range d.Addrs {
		if a.Is6() == v6 {
			pool = append(pool, a)
		}
	}
	for _, s := range semExtraAddrs {
		if a := addr(s); a.Is6() == v6 {
			pool = append(pool, a)
		}
	}
	slices.SortFunc(pool, netip.Addr.Compare)
	any := func() netip.Addr { return pool[rng.IntN(len(pool))] }
	p := testPacket{src: any(), dst: any(), dport: uint16(rng.IntN(210)), established: rng.IntN(8) == 0}
	ep := func() (string, netip.Addr) {
		name := semIfs[rng.IntN(len(semIfs))]
		e := d.Endpoints[name]
		own := e.IPv4
		if v6 {
			own = e.IPv6
		}
		if !own.IsValid() || rng.IntN(6) == 0 {
			return name, any() // spoofed, or a family the pod lacks
		}
		return name, own
	}
	var frontends []policy.ServiceFrontend
	for fr := range d.Services {
		if fr.Addr.Is6() == v6 {
			frontends = append(frontends, fr)
		}
	}
	if len(frontends) > 0 && rng.IntN(frontendOneIn) == 0 {
		slices.SortFunc(frontends, compareFrontends)
		return frontendPacket(rng, p, frontends[rng.IntN(len(frontends))], ep)
	}
	switch rng.IntN(5) {
	case 0: // pod to pod
		p.hook = "FORWARD"
		p.in, p.src = ep()
		p.out, p.dst = ep()
	case 1: // pod out
		p.hook, p.out = "FORWARD", "eth0"
		p.in, p.src = ep()
	case 2: // in to pod
		p.hook, p.in = "FORWARD", "eth0"
		p.out, p.dst = ep()
	case 3: // pod to node
		p.hook = "INPUT"
		p.in, p.src = ep()
	case 4: // node to pod
		p.hook = "OUTPUT"
		p.out, p.dst = ep()
	}
	icmp := uint8(protoICMP)
	if v6 {
		icmp = protoICMPv6
	}
	p.proto = []uint8{6, 17, 132, icmp, 47}[rng.IntN(5)]
	if p.proto == protoICMPv6 {
		p.icmpType = []uint8{128, 129, 133, 135, 136, 143, 1, 130, 134, 137}[rng.IntN(10)]
		if isND(p) {
			// Hop limits and link destinations of ND and MLD, valid
			// or not, and duplicate address detection.
			p.hopLimit = []uint8{255, 1, 64, 254}[rng.IntN(4)]
			if rng.IntN(2) == 0 {
				p.dst = addr([]string{"fe80::1", "ff02::1", "ff02::2", "ff02::16", "ff02::1:ff00:5", "ff05::1:3"}[rng.IntN(6)])
			}
			if rng.IntN(6) == 0 {
				p.src = netip.IPv6Unspecified()
			}
		}
	}
	return p
}

// frontendPacket makes p a pod's new connection to fr, or to its address
// on another port; now and then from a remote host or the node. ep picks
// the pod and its source address.
func frontendPacket(rng *rand.Rand, p testPacket, fr policy.ServiceFrontend, ep func() (string, netip.Addr)) testPacket {
	p.hook, p.out, p.established = "FORWARD", "eth0", false
	p.in, p.src = ep()
	switch rng.IntN(8) {
	case 0:
		p.in = "eth0"
	case 1:
		p.hook, p.in = "OUTPUT", ""
	}
	p.dst, p.dport, p.proto = fr.Addr, fr.Port, fr.Proto
	if rng.IntN(6) == 0 {
		p.dport++
	}
	return p
}

// TestSemanticsMatchEBPF applies random states one after another (so the
// incremental path is what runs) and checks, packet by packet, that the
// rules and sets decide what the eBPF dataplane decides for the same
// state: anti-spoofing, isolation, identities, world, CIDR classes with
// excepts, protocols and port ranges, and Services translated by the
// dataplane (standalone mode): each backend a pod's new connection may
// reach, with its probability and the verdict there, connections to a
// frontend without backends refused, a pod reaching itself masqueraded.
// The model it checks against is refPaths, which
// TestPrivilegedDataplanesAgree holds to the real eBPF programs; where
// the dataplanes differ by design (byDesign), it holds the rules to the
// iptables side of the difference.
func TestSemanticsMatchEBPF(t *testing.T) {
	states, packets := 300, 400
	if testing.Short() {
		states = 60
	}
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(m), 2))
			n := newFakeNode()
			d, err := New(Options{Mode: m, Runner: n, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range semIfs {
				if err := d.Attach(name); err != nil {
					t.Fatal(err)
				}
			}
			checked := map[bool]int{}
			kinds := map[string]int{}
			for s := range states {
				want := randomDesired(rng)
				mustApply(t, d, want)
				assertNoViolations(t, n)
				route := routeTo(want)
				for range packets {
					p := randomPacket(rng, want)
					got, err := n.evalPaths(m, p, route)
					if err != nil {
						t.Fatalf("state %d: evaluate %v: %v", s, p, err)
					}
					if ref := refPaths(want, p, route, iptablesDataplane); !samePaths(got, ref) {
						t.Fatalf("state %d: %v:\niptables %v\neBPF     %v\nendpoints: %s\naddrs: %v\ncidrs: %v\nservices: %s",
							s, p, got, ref, dumpEndpoints(want), want.Addrs, want.CIDRs, dumpServices(want))
					}
					if c := byDesign(want, p); c != "" {
						kinds["by design: "+c]++
					}
					for _, v := range got {
						checked[v.verdict == "ACCEPT"]++
						switch {
						case isReject(v.verdict):
							kinds["refused"]++
						case v.to.IsValid() && v.masq:
							kinds["hairpin "+v.verdict]++
						case v.to.IsValid():
							kinds["translated "+v.verdict]++
						}
					}
				}
			}
			if checked[true] < states*packets/10 || checked[false] < states*packets/10 {
				t.Fatalf("verdicts allow/deny = %d/%d: too lopsided to test anything", checked[true], checked[false])
			}
			t.Logf("paths checked: %v", kinds)
			for _, k := range []string{"refused", "hairpin ACCEPT", "translated ACCEPT", "translated DROP", "by design: sctp-port"} {
				if kinds[k] < states/10 {
					t.Errorf("only %d packets %s: the random states test too little of it (%v)", kinds[k], k, kinds)
				}
			}
		})
	}
}

func dumpServices(d *policy.Desired) string {
	s := ""
	for _, fr := range sortedFrontends(d.Services) {
		s += fmt.Sprintf("\n  %s: %+v", frontendText(fr), *d.Services[fr])
	}
	return s
}

func dumpEndpoints(d *policy.Desired) string {
	s := ""
	for _, name := range sortedKeys(d.Endpoints) {
		s += fmt.Sprintf("\n  %s: %+v", name, *d.Endpoints[name])
	}
	return s
}
