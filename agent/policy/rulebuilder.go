package policy

import (
	"cmp"
	"maps"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ruleBuilder collects the (key, port range) entries of an endpoint's
// rules in a flat list and builds the Rules map from it: sorted, the
// overlapping and adjacent ranges of a key merged, every key's ranges in
// one shared backing array, and the Origins map alike. It allocates two
// objects per build where appending to a map of slices allocates one per
// key, and its lists are reused from build to build. Compile and
// Incremental both build with it.
type ruleBuilder struct {
	ents []ruleEnt
	// Scratch of a build: the entries' keys packed with their index (see
	// sortEnts) in two buffers, and the entries in order; the keys in order, each with its
	// merged ranges in ranges.
	order  []uint64
	spare  []uint64
	sorted []ruleEnt
	groups []ruleGroup
	ranges []PortRange
	// over is, by direction, the first key of the last build that needs
	// more than MaxPortRanges ranges (n == 0: none).
	over [2]overKey
	// from are the rules the entries collected since the last build come
	// from (see RuleOrigin, setOrigin); an entry names its rule by index,
	// so that entries stay small and hold no pointer for the collector to
	// scan. origin is the index, plus one, of the entries added now.
	from   []*RuleOrigin
	origin uint32
}

// ruleEnt is one entry; hi and lo order it by key, then range.
type ruleEnt struct {
	hi uint64 // peer, direction, protocol
	lo uint32 // range low, range high
	o  uint32 // its origin: index into ruleBuilder.from plus one, 0 for none
}

// ruleGroup is one key of a build and its ranges, ranges[start:end].
type ruleGroup struct {
	k          RuleKey
	start, end int
	origin     *RuleOrigin // the smallest of its entries' origins
	// sameOrigin: the origins a rebuild started from give the key this
	// origin (see reorigin). kept: the rules it started from have these
	// very ranges, and the key the same origin.
	sameOrigin, kept bool
}

// setOrigin makes o the origin of the entries added from now until the
// next build; nil leaves theirs unknown. o must not change before then.
func (b *ruleBuilder) setOrigin(o *RuleOrigin) {
	switch n := len(b.from); {
	case o == nil:
		b.origin = 0
	case n > 0 && b.from[n-1] == o:
		b.origin = uint32(n)
	default:
		b.from = append(b.from, o)
		b.origin = uint32(n + 1)
	}
}

func (b *ruleBuilder) add(k RuleKey, pr PortRange) {
	b.ents = append(b.ents, ruleEnt{
		hi: uint64(k.Peer)<<32 | uint64(k.Dir)<<8 | uint64(k.Proto),
		lo: uint32(pr.Lo)<<16 | uint32(pr.Hi),
		o:  b.origin,
	})
}

// addEnts adds ents, entries an earlier build collected, as coming from
// the current origin.
func (b *ruleBuilder) addEnts(ents []ruleEnt) {
	start := len(b.ents)
	b.ents = append(b.ents, ents...)
	for i := range b.ents[start:] {
		b.ents[start+i].o = b.origin
	}
}

func (e ruleEnt) key() RuleKey {
	return RuleKey{Peer: policyapi.Peer(e.hi >> 32), Dir: policyapi.Direction(e.hi >> 8), Proto: uint8(e.hi)}
}

func compareEnt(x, y ruleEnt) int {
	if c := cmp.Compare(x.hi, y.hi); c != 0 {
		return c
	}
	return cmp.Compare(x.lo, y.lo)
}

// packIndexBits is how many low bits of a packed key hold the entry's
// index. The key above them takes 41 bits: peer, direction (one bit) and
// protocol.
const packIndexBits = 23

// sortEnts returns ents ordered as compareEnt orders them; the result is
// ents itself or the builder's other list. While the entries fit, it
// packs each entry's key with its index in one uint64, radix-sorts those
// by key and then orders each key's few ranges: several times cheaper
// than sorting the entries with a comparison function.
func (b *ruleBuilder) sortEnts(ents []ruleEnt) []ruleEnt {
	if len(ents) > 1<<packIndexBits {
		slices.SortFunc(ents, compareEnt)
		return ents
	}
	order := b.order[:0]
	for i, e := range ents {
		if e.hi&0xffff_fe00 != 0 { // a direction other than Ingress or Egress
			slices.SortFunc(ents, compareEnt)
			return ents
		}
		k := e.hi>>32<<9 | e.hi&0x1ff
		order = append(order, k<<packIndexBits|uint64(i))
	}
	order, b.spare = radixSortKeys(order, b.spare)
	out := b.sorted[:0]
	for i := 0; i < len(order); {
		k := order[i] >> packIndexBits
		start := len(out)
		for ; i < len(order) && order[i]>>packIndexBits == k; i++ {
			out = append(out, ents[order[i]&(1<<packIndexBits-1)])
		}
		if run := out[start:]; len(run) > 1 {
			slices.SortFunc(run, func(x, y ruleEnt) int { return cmp.Compare(x.lo, y.lo) })
		}
	}
	b.order, b.sorted = order, ents[:0]
	return out
}

// radixSortKeys sorts packed keys by their bits above packIndexBits, a
// byte at a time from the lowest, keeping the order of equal keys. It
// skips the bytes every key has in common (the peer's upper bytes,
// usually). It returns the sorted keys and the other buffer, spare
// (grown) or keys.
func radixSortKeys(keys, spare []uint64) (sorted, other []uint64) {
	const digits = (64 - packIndexBits + 7) / 8
	if len(keys) < 2 {
		return keys, spare
	}
	var counts [digits][256]int
	for _, k := range keys {
		for d := range counts {
			counts[d][byte(k>>(packIndexBits+8*d))]++
		}
	}
	src, dst := keys, slices.Grow(spare[:0], len(keys))[:len(keys)]
	for d := range counts {
		shift := packIndexBits + 8*d
		c := &counts[d]
		if c[byte(src[0]>>shift)] == len(src) {
			continue
		}
		sum := 0
		for i, n := range c {
			c[i] = sum
			sum += n
		}
		for _, k := range src {
			x := byte(k >> shift)
			dst[c[x]] = k
			c[x]++
		}
		src, dst = dst, src
	}
	return src, dst
}

// group sorts the entries collected since the last build and merges each
// key's ranges into b.groups and b.ranges. A direction with a key that
// needs more than MaxPortRanges ranges keeps no group: b.over records
// the first such key of each direction.
func (b *ruleBuilder) group() {
	ents := b.sortEnts(b.ents)
	b.ents = ents[:0]
	b.over = [2]overKey{}
	groups, ranges := b.groups[:0], b.ranges[:0]
	defer func() { b.groups, b.ranges = groups, ranges }()
	for i := 0; i < len(ents); {
		start := len(ranges)
		j := i
		var origin uint32
		for ; j < len(ents) && ents[j].hi == ents[i].hi; j++ {
			if o := ents[j].o; o != 0 && o != origin && (origin == 0 || compareOrigin(b.from[o-1], b.from[origin-1]) < 0) {
				origin = o
			}
			r := PortRange{Lo: uint16(ents[j].lo >> 16), Hi: uint16(ents[j].lo)}
			if n := len(ranges); n > start && int(r.Lo) <= int(ranges[n-1].Hi)+1 {
				ranges[n-1].Hi = max(ranges[n-1].Hi, r.Hi)
				continue
			}
			ranges = append(ranges, r)
		}
		k := ents[i].key()
		if n := len(ranges) - start; n > MaxPortRanges && b.over[k.Dir].n == 0 {
			b.over[k.Dir] = overKey{k: k, n: n}
		}
		g := ruleGroup{k: k, start: start, end: len(ranges)}
		if origin != 0 {
			g.origin = b.from[origin-1]
		}
		groups = append(groups, g)
		i = j
	}
	clear(b.from)
	b.from, b.origin = b.from[:0], 0
	if b.over[policyapi.Ingress].n > 0 || b.over[policyapi.Egress].n > 0 {
		groups = slices.DeleteFunc(groups, func(g ruleGroup) bool { return b.over[g.k.Dir].n > 0 })
	}
}

// overKey is a key that needs n > MaxPortRanges ranges.
type overKey struct {
	k RuleKey
	n int
}

// build returns the rules collected since the last build, without the
// directions b.over names.
func (b *ruleBuilder) build() map[RuleKey][]PortRange {
	b.group()
	return b.fresh()
}

// fresh returns a new map of the grouped rules, in a new backing array.
func (b *ruleBuilder) fresh() map[RuleKey][]PortRange {
	rules := make(map[RuleKey][]PortRange, len(b.groups))
	backing := slices.Clone(b.ranges)
	for _, g := range b.groups {
		rules[g.k] = backing[g.start:g.end:g.end]
	}
	return rules
}

// maxPatches is how many rebuilds in a row may patch a copy of the
// previous rules; the next builds them afresh. Patched rules keep the
// backing arrays of the rules they were copied from, so the bound keeps
// an endpoint from holding on to the arrays of many generations.
const maxPatches = 8

// rebuild is build for an endpoint whose rules were old and origins
// oldOrigins, and returns its origins as reorigin does: equal rules are
// old itself (changed false when the origins are unchanged too), so the
// caller need not compare them. When few keys changed, the new rules are
// a copy of old with those keys replaced and the others sharing old's
// ranges, which is cheaper than inserting every key into a new map;
// *patches counts such rebuilds since the last fresh one. A key whose
// origin changed counts as changed even when its ranges did not: it gets
// new ranges, so that a dataplane may take a key's unchanged ranges
// slice for an unchanged origin (see Desired).
func (b *ruleBuilder) rebuild(old map[RuleKey][]PortRange, oldOrigins map[RuleKey]*RuleOrigin, patches *int) (rules map[RuleKey][]PortRange, origins map[RuleKey]*RuleOrigin, changed bool) {
	b.group()
	origins, changed = b.reorigin(oldOrigins)
	found, kept := 0, 0
	for i := range b.groups {
		g := &b.groups[i]
		rs, ok := old[g.k]
		if ok {
			found++
		}
		if g.kept = ok && g.sameOrigin && slices.Equal(rs, b.ranges[g.start:g.end]); g.kept {
			kept++
		}
	}
	if old != nil && kept == len(b.groups) && found == len(old) {
		return old, origins, changed
	}
	removed := len(old) - found
	if old == nil || *patches >= maxPatches || 2*(len(b.groups)-kept+removed) > len(b.groups) {
		*patches = 0
		return b.fresh(), origins, true
	}
	*patches++
	rules = maps.Clone(old)
	if removed > 0 {
		for k := range rules {
			if _, ok := slices.BinarySearchFunc(b.groups, k, compareGroupKey); !ok {
				delete(rules, k)
			}
		}
	}
	n := 0
	for _, g := range b.groups {
		if !g.kept {
			n += g.end - g.start
		}
	}
	backing := make([]PortRange, 0, n)
	for _, g := range b.groups {
		if !g.kept {
			backing = append(backing, b.ranges[g.start:g.end]...)
			rules[g.k] = backing[len(backing)-(g.end-g.start) : len(backing) : len(backing)]
		}
	}
	return rules, origins, true
}

// compareGroupKey orders keys as a build orders its groups.
func compareGroupKey(g ruleGroup, k RuleKey) int {
	if c := cmp.Compare(g.k.Peer, k.Peer); c != 0 {
		return c
	}
	if c := cmp.Compare(g.k.Dir, k.Dir); c != 0 {
		return c
	}
	return cmp.Compare(g.k.Proto, k.Proto)
}

// forNamedPort calls fn with every port ports gives name under proto, as
// ResolveNamedPort returns them, without allocating.
func forNamedPort(ports []policyapi.NamedPort, name string, proto uint8, fn func(port uint16)) {
	for _, np := range ports {
		if np.Name == name && np.Proto == proto {
			fn(np.Port)
		}
	}
}
