package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

const (
	benchEndpoints  = 640
	benchIdentities = 1000
	// benchIngressPeers is the identities each endpoint admits, each on
	// its own port range, so no two share a union set: 24 make the state
	// load just over 50k rules.
	benchIngressPeers = 24
)

// benchState is a dual-stack node with benchEndpoints local pods, each
// selected by its own policy (so 640 policies), in a cluster of
// benchIdentities identities with 10 pods each (an IPv4 and an IPv6
// address per pod: 20k addresses). Endpoint i's ingress allows
// benchIngressPeers identities on a TCP port range each; its egress allows
// DNS to anything, TCP 443 to one of 8 IPv4 ipBlocks (each with an
// except), TCP to 5 identities (one union set) and every other protocol to
// the world. That is ~40 rules per endpoint and family, ~50k rules in all.
// shift moves endpoint changed's first port range.
func benchState(changed int, shift uint16) *policy.Desired {
	d := &policy.Desired{
		Addrs:     make(map[netip.Addr]policy.AddrEntry, benchIdentities*10+benchEndpoints),
		CIDRs:     map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: make(map[string]*policy.EndpointPolicy, benchEndpoints),
	}
	for k := range 8 {
		d.CIDRs[netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + k), 0, 0}), 16)] = policyapi.CIDRClassBit | policyapi.Peer(k+1)
		d.CIDRs[netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + k), 5, 0}), 24)] = policyapi.NoCIDRClass
	}
	for i := range benchIdentities * 10 {
		e := policy.AddrEntry{Identity: policyapi.FirstPodIdentity + policyapi.Peer(i%benchIdentities), CIDRClass: policyapi.NoCIDRClass}
		d.Addrs[netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})] = e
		d.Addrs[netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x80, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})] = e
	}
	for i := range benchEndpoints {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		a6 := netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(i >> 8), 15: byte(i)})
		d.Addrs[a] = policy.AddrEntry{Identity: 5000 + policyapi.Peer(i), CIDRClass: policyapi.NoCIDRClass}
		d.Addrs[a6] = policy.AddrEntry{Identity: 5000 + policyapi.Peer(i), CIDRClass: policyapi.NoCIDRClass}
		rules := make(map[policy.RuleKey][]policy.PortRange, 28)
		id := func(j int) policyapi.Peer {
			return policyapi.FirstPodIdentity + policyapi.Peer((i*7+j*13)%benchIdentities)
		}
		for j := range benchIngressPeers {
			lo := 8000 + uint16(j)*10
			if i == changed && j == 0 {
				lo += shift
			}
			rules[policy.RuleKey{Peer: id(j), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = ports(lo, lo+5)
		}
		rules[policy.RuleKey{Peer: policyapi.PeerAny, Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}] = ports(53, 53)
		rules[policy.RuleKey{Peer: policyapi.CIDRClassBit | policyapi.Peer(i%8+1), Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(443, 443)
		for j := range 5 {
			rules[policy.RuleKey{Peer: id(100 + j), Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(80, 80, 8080, 8090)
		}
		rules[policy.RuleKey{Peer: policyapi.PeerWorld, Dir: policyapi.Egress, Proto: policyapi.ProtoOther}] = ports(0, 65535)
		d.Endpoints[fmt.Sprintf("lxc%d", i)] = &policy.EndpointPolicy{IPv4: a, IPv6: a6, IngressIsolated: true, EgressIsolated: true, Rules: rules}
	}
	return d
}

// discardRunner accepts every command and reports an empty state, so a
// benchmark measures only lockstep's own work.
type discardRunner struct{}

func (discardRunner) Run(context.Context, string, []string, []byte) ([]byte, error) { return nil, nil }

// BenchmarkPlanOneChange measures the Go side of an Apply of one rule
// change with benchState (~50.6k rules) applied: rendering, comparing and
// writing the payloads, without running any tool.
func BenchmarkPlanOneChange(b *testing.B) {
	states := [2]*policy.Desired{benchState(7, 0), benchState(7, 3)}
	d := newTestDataplane(b, ModeNFT, discardRunner{}, states[0])
	mustApply(b, d, states[0])
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		mustApply(b, d, states[i%2])
		i++
	}
}
