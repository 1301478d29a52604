package policy

import (
	"maps"
	"math/rand/v2"
	"reflect"
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

// mergeRanges sorts rs and merges overlapping and adjacent ranges, one
// key at a time: what a build must give each key.
func mergeRanges(rs []PortRange) []PortRange {
	slices.SortFunc(rs, func(a, b PortRange) int {
		if a.Lo != b.Lo {
			return int(a.Lo) - int(b.Lo)
		}
		return int(a.Hi) - int(b.Hi)
	})
	out := make([]PortRange, 0, len(rs))
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.Lo) <= int(out[n-1].Hi)+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// TestBuildMergesRangesAndKeepsTheSmallestOrigin holds a build to a map
// of slices merged key by key, and each key's origin to the smallest of
// the rules that added to it (compareOrigin), over builds that reuse the
// builder: entries added directly and re-added from an earlier build
// (addEnts, as a rule's cache does) under another origin, and entries
// without one.
func TestBuildMergesRangesAndKeepsTheSmallestOrigin(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rules := []*RuleOrigin{
		{Namespace: "a", Name: "p", Dir: policyapi.Ingress, Index: 1},
		{Namespace: "a", Name: "p", Dir: policyapi.Ingress, Index: 0},
		{Namespace: "a", Name: "q", Dir: policyapi.Egress, Index: 0},
		{Namespace: "b", Name: "p", Dir: policyapi.Ingress, Index: 0},
		nil,
	}
	var b ruleBuilder
	var cached []ruleEnt // the first rule's entries of the previous round
	for round := range 20 {
		wantRules := map[RuleKey][]PortRange{}
		wantOrigins := map[RuleKey]RuleOrigin{}
		add := func(o *RuleOrigin, k RuleKey, pr PortRange) {
			wantRules[k] = append(wantRules[k], pr)
			if old, ok := wantOrigins[k]; o != nil && (!ok || compareOrigin(o, &old) < 0) {
				wantOrigins[k] = *o
			}
		}
		var first []ruleEnt
		for _, o := range rules {
			b.setOrigin(o)
			start := len(b.ents)
			for range rng.IntN(40) {
				k := RuleKey{Peer: policyapi.FirstPodIdentity + policyapi.Peer(rng.IntN(8)), Dir: policyapi.Direction(rng.IntN(2)), Proto: policyapi.ProtoTCP}
				lo := uint16(rng.IntN(200))
				pr := PortRange{Lo: lo, Hi: lo + uint16(rng.IntN(20))}
				b.add(k, pr)
				add(o, k, pr)
			}
			if o == rules[0] {
				first = slices.Clone(b.ents[start:])
			}
		}
		// The first rule's entries of the previous build again, as the
		// last rule's.
		last := rules[len(rules)-2]
		b.setOrigin(last)
		b.addEnts(cached)
		for _, e := range cached {
			add(last, e.key(), PortRange{Lo: uint16(e.lo >> 16), Hi: uint16(e.lo)})
		}
		cached = first
		for k, rs := range wantRules {
			wantRules[k] = mergeRanges(rs)
		}
		if got := b.build(); !maps.EqualFunc(got, wantRules, slices.Equal) {
			t.Fatalf("round %d: rules\n%v\nwant\n%v", round, got, wantRules)
		}
		if got := b.origins(); !maps.EqualFunc(got, wantOrigins, func(g *RuleOrigin, w RuleOrigin) bool { return *g == w }) {
			t.Fatalf("round %d: origins\n%v\nwant\n%v", round, got, wantOrigins)
		}
	}
}

// TestReoriginSharesWhatDidNotChange holds reorigin to origins: the
// previous map itself when no key's origin changed, else a map equal to
// a fresh one whether patched (few changed) or not, and never the
// previous map changed in place.
func TestReoriginSharesWhatDidNotChange(t *testing.T) {
	p0 := &RuleOrigin{Namespace: "a", Name: "p", Dir: policyapi.Ingress, Index: 0}
	p1 := &RuleOrigin{Namespace: "a", Name: "p", Dir: policyapi.Ingress, Index: 1}
	key := func(i int) RuleKey {
		return RuleKey{Peer: policyapi.FirstPodIdentity + policyapi.Peer(i), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}
	}
	// build adds keys [0, n) from p1, key i from p0 as well when p0at(i).
	build := func(b *ruleBuilder, n int, p0at func(int) bool) {
		for i := range n {
			b.setOrigin(p1)
			b.add(key(i), PortRange{Lo: 80, Hi: 80})
			if p0at(i) {
				b.setOrigin(p0)
				b.add(key(i), PortRange{Lo: 81, Hi: 81})
			}
		}
		b.group()
	}
	none := func(int) bool { return false }
	var b ruleBuilder
	build(&b, 10, none)
	old := b.origins()
	for _, tc := range []struct {
		name    string
		n       int
		p0at    func(int) bool
		changed bool
	}{
		{"same", 10, none, false},
		{"one origin changed (patched)", 10, func(i int) bool { return i == 3 }, true},
		{"one key gone (patched)", 9, none, true},
		{"one key added (patched)", 11, none, true},
		{"most origins changed (afresh)", 10, func(i int) bool { return i > 1 }, true},
		{"most keys gone (afresh)", 2, none, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(old)
			build(&b, tc.n, tc.p0at)
			got, changed := b.reorigin(old)
			if changed != tc.changed {
				t.Errorf("changed %v, want %v", changed, tc.changed)
			}
			if !maps.Equal(got, b.origins()) {
				t.Errorf("origins %v, want %v", got, b.origins())
			}
			if !tc.changed && reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(old).UnsafePointer() {
				t.Error("unchanged origins are a new map, not the previous one")
			}
			if !maps.Equal(old, before) {
				t.Error("the previous origins changed in place")
			}
		})
	}
}
