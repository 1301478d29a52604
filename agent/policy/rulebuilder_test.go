package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortEntsOrdersAsCompareEnt holds the packed radix sort of a build
// to the order of compareEnt: pod identities and CIDR classes (the top
// bit), several ranges per key added out of order, and a direction the
// packed key has no room for, which sorts the entries the plain way.
func TestSortEntsOrdersAsCompareEnt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	peers := []Peer{PeerAny, PeerWorld, FirstPodIdentity, FirstPodIdentity + 1, 1 << 20, NoCIDRClass, CIDRClassBit | 7, ^Peer(0)}
	protos := []uint8{ProtoOther, ProtoTCP, ProtoUDP, ProtoSCTP}
	for _, tc := range []struct {
		name string
		n    int
		dirs []Direction
	}{
		{"empty", 0, []Direction{Ingress}},
		{"one", 1, []Direction{Egress}},
		{"both directions", 2000, []Direction{Ingress, Egress}},
		{"unknown direction", 500, []Direction{Ingress, Egress, 7}},
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
