package hns

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// reference is the verdict of d for a packet between local endpoint ep and
// remote in dir, as the eBPF dataplane computes it (bpf/lib/policy.h): a
// direction that is not isolated allows everything; otherwise the remote
// end is a pod identity with its CIDR class (known address) or PeerWorld
// with the class of its longest prefix, and the packet passes if a rule
// for the identity, the class or PeerAny covers the protocol and port.
func reference(d *policy.Desired, ep string, dir policyapi.Direction, remote netip.Addr, proto uint8, port uint16) bool {
	e := d.Endpoints[ep]
	if e == nil || !(dir == policyapi.Ingress && e.IngressIsolated || dir == policyapi.Egress && e.EgressIsolated) {
		return true
	}
	key := proto
	if !slices.Contains(portProtocols, proto) {
		key = policyapi.ProtoOther
	}
	identity, class := policyapi.PeerWorld, lpmClass(d.CIDRs, remote)
	if a, ok := d.Addrs[remote]; ok {
		identity, class = a.Identity, a.CIDRClass
	}
	allows := func(peer policyapi.Peer) bool {
		ranges, ok := e.Rules[policy.RuleKey{Peer: peer, Dir: dir, Proto: key}]
		if !ok {
			return false
		}
		if key == policyapi.ProtoOther {
			return true
		}
		return slices.ContainsFunc(ranges, func(r policy.PortRange) bool { return port >= r.Lo && port <= r.Hi })
	}
	return allows(identity) || class != policyapi.NoCIDRClass && allows(class) || allows(policyapi.PeerAny)
}

// lpmClass is the class of a's longest prefix in cidrs.
func lpmClass(cidrs map[netip.Prefix]policyapi.Peer, a netip.Addr) policyapi.Peer {
	for bits := a.BitLen(); bits >= 0; bits-- {
		p, _ := a.Prefix(bits)
		if c, ok := cidrs[p]; ok {
			return c
		}
	}
	return policyapi.NoCIDRClass
}

// Probe packets: remote addresses beyond the pods', protocols (ICMP and
// ICMPv6 stand for the portless ones) and destination ports around the
// ones the scenarios use.
var (
	probeAddrs = []string{"10.0.5.5", "10.0.1.200", "10.9.0.1", "172.16.0.1", "192.168.1.1",
		"8.8.8.8", "fd00::99", "fd00:1::1", "2001:db8::1"}
	probeProtos = []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP, 1, 58}
	probePorts  = []uint16{0, 22, 53, 79, 80, 81, 443, 999, 1000, 1500, 2000, 2001, 5432, 9000, 65535}
)

// verdictMismatches compares m's verdicts with the reference for every
// local endpoint of d, direction, probe and pod address, protocol and port.
func verdictMismatches(m *Memory, d *policy.Desired) []string {
	var addrs []netip.Addr
	for a := range d.Addrs {
		addrs = append(addrs, a)
	}
	for _, s := range probeAddrs {
		addrs = append(addrs, netip.MustParseAddr(s))
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var bad []string
	for _, ep := range slices.Sorted(maps.Keys(d.Endpoints)) {
		for _, dir := range []policyapi.Direction{policyapi.Ingress, policyapi.Egress} {
			for _, a := range addrs {
				for _, proto := range probeProtos {
					for _, port := range probePorts {
						want := reference(d, ep, dir, a, proto, port)
						if got := m.Allowed(ep, directionOf(dir), a, proto, port); got != want {
							bad = append(bad, fmt.Sprintf("%s %s %s proto %d port %d: hns allows=%v, reference %v",
								ep, dir, a, proto, port, got, want))
						}
					}
				}
			}
		}
	}
	return bad
}

// assertMatches fails t unless m holds exactly what d renders to, no
// request ever broke an invariant, and m's verdicts are d's.
func assertMatches(t *testing.T, m *Memory, d *policy.Desired) {
	t.Helper()
	if v := m.Violations(); len(v) > 0 {
		t.Fatalf("%d requests broke an HNS invariant, first: %v", len(v), v[0])
	}
	want, err := render(d)
	if err != nil {
		t.Fatal(err)
	}
	sets, acls := m.State()
	for id, s := range want.sets {
		if have, ok := sets[id]; !ok || !equalSet(have, s) {
			t.Errorf("set %s: hns has %+v, want %+v", id, have, s)
		}
	}
	for id := range sets {
		if _, ok := want.sets[id]; !ok {
			t.Errorf("set %s: left in hns, desired state lacks it", id)
		}
	}
	for name := range acls {
		if !slices.EqualFunc(acls[name], want.acls[name], equalACL) {
			t.Errorf("endpoint %s: hns has ACLs %+v, want %+v", name, acls[name], want.acls[name])
		}
	}
	for name := range want.acls {
		if _, ok := acls[name]; !ok {
			t.Errorf("endpoint %s: hns has no ACLs, want %+v", name, want.acls[name])
		}
	}
	if bad := verdictMismatches(m, d); len(bad) > 0 {
		t.Errorf("%d verdicts differ from the reference, first: %s", len(bad), bad[0])
	}
}

// ids names sets for a delete request.
func ids(id ...string) []SetPolicy {
	out := make([]SetPolicy, len(id))
	for i, s := range id {
		out[i] = SetPolicy{ID: s}
	}
	return out
}
