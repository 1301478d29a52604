package policy

import (
	"math/rand/v2"
	"slices"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestSortEntsOrdersAsCompareEnt holds the packed radix sort of a build
// to the order of compareEnt: pod identities and CIDR classes (the top
// bit), several ranges per key added out of order, and a direction the
// packed key has no room for, which sorts the entries the plain way.
func TestSortEntsOrdersAsCompareEnt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	peers := []policyapi.Peer{policyapi.PeerAny, policyapi.PeerWorld, policyapi.FirstPodIdentity, policyapi.FirstPodIdentity + 1, 1 << 20, policyapi.NoCIDRClass, policyapi.CIDRClassBit | 7, ^policyapi.Peer(0)}
	protos := []uint8{policyapi.ProtoOther, policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP}
	for _, tc := range []struct {
		name string
		n    int
		dirs []policyapi.Direction
	}{
		{"empty", 0, []policyapi.Direction{policyapi.Ingress}},
		{"one", 1, []policyapi.Direction{policyapi.Egress}},
		{"both directions", 2000, []policyapi.Direction{policyapi.Ingress, policyapi.Egress}},
		{"unknown direction", 500, []policyapi.Direction{policyapi.Ingress, policyapi.Egress, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b ruleBuilder
			for range 2 { // the second round reuses the builder's buffers
				for range tc.n {
					lo := uint16(rng.IntN(1 << 16))
					b.add(RuleKey{Peer: peers[rng.IntN(len(peers))], Dir: tc.dirs[rng.IntN(len(tc.dirs))], Proto: protos[rng.IntN(len(protos))]},
						PortRange{Lo: lo, Hi: lo + uint16(rng.IntN(100))})
				}
				want := slices.Clone(b.ents)
				slices.SortFunc(want, compareEnt)
				got := b.sortEnts(b.ents)
				if !slices.Equal(got, want) {
					t.Fatalf("sortEnts of %d entries differs from compareEnt's order", tc.n)
				}
				b.ents = got[:0]
			}
		})
	}
}
