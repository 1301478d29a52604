package policy

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// cidrClasses partitions the address space by the ipBlock peers of all
// policies. An address's class is the set of distinct ipBlocks (cidr minus
// excepts) it lies in; every distinct non-empty set gets an id
// CIDRClassBit|n, n >= 1, numbered in the order of the sorted sets of
// sorted block keys, so ids depend only on the policies, not on the order
// they arrive in.
//
// The LPM table holds one entry per ipBlock cidr and except (plus the two
// default routes): the value of prefix p is the class of the addresses in p
// that no longer listed prefix covers. Prefixes are nested or disjoint, so
// every block's membership is constant on that remainder, and longest-
// prefix lookup yields exactly each address's class. Entries whose value
// equals that of their nearest listed ancestor are dropped.
type cidrClasses struct {
	blocks []*policyapi.CIDRBlock // sorted by key, distinct
	lpm    map[netip.Prefix]policyapi.Peer
	lens   [2][]int           // prefix lengths present in lpm, longest first; [0] IPv4, [1] IPv6
	member [][]policyapi.Peer // by block index: the classes containing the block
	index  map[string]int     // block key -> index
}

var (
	allIPv4 = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	allIPv6 = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
)

func newCIDRClasses(blocks []*policyapi.CIDRBlock) *cidrClasses {
	c := &cidrClasses{index: make(map[string]int)}
	for _, b := range blocks {
		if _, ok := c.index[b.Key]; !ok {
			c.index[b.Key] = 0
			c.blocks = append(c.blocks, b)
		}
	}
	slices.SortFunc(c.blocks, func(a, b *policyapi.CIDRBlock) int { return strings.Compare(a.Key, b.Key) })
	for i, b := range c.blocks {
		c.index[b.Key] = i
	}

	// Blocks by their cidr, and the cidr lengths in use, to find the
	// blocks whose cidr contains a prefix without scanning them all.
	byCIDR := make(map[netip.Prefix][]int)
	cidrLens := make(map[int]bool)
	prefixes := []netip.Prefix{allIPv4, allIPv6}
	for i, b := range c.blocks {
		byCIDR[b.CIDR] = append(byCIDR[b.CIDR], i)
		cidrLens[b.CIDR.Bits()] = true
		prefixes = append(prefixes, b.CIDR)
		prefixes = append(prefixes, b.Except...)
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return policyapi.ComparePrefix(a, b)
	})
	prefixes = slices.Compact(prefixes)

	// The member set of each prefix's remainder.
	sets := make(map[netip.Prefix][]int, len(prefixes))
	for _, p := range prefixes {
		var set []int
		for l := 0; l <= p.Bits(); l++ {
			if !cidrLens[l] {
				continue
			}
			anc, _ := p.Addr().Prefix(l)
			for _, i := range byCIDR[anc] {
				if !excepted(c.blocks[i], p) {
					set = append(set, i)
				}
			}
		}
		slices.Sort(set)
		sets[p] = set
	}

	// Number the distinct non-empty sets in sorted order.
	keyOf := make(map[netip.Prefix]string, len(sets))
	keys := make(map[string][]int)
	for p, set := range sets {
		if len(set) > 0 {
			k := setKey(set)
			keyOf[p] = k
			keys[k] = set
		}
	}
	ordered := make([][]int, 0, len(keys))
	for _, set := range keys {
		ordered = append(ordered, set)
	}
	slices.SortFunc(ordered, slices.Compare)
	ids := make(map[string]policyapi.Peer, len(ordered))
	c.member = make([][]policyapi.Peer, len(c.blocks))
	for n, set := range ordered {
		id := policyapi.CIDRClassBit | policyapi.Peer(n+1)
		ids[setKey(set)] = id // once per distinct set
		for _, i := range set {
			c.member[i] = append(c.member[i], id)
		}
	}

	// Emit prefixes shortest first, dropping those that repeat their
	// nearest emitted ancestor's class.
	c.lpm = make(map[netip.Prefix]policyapi.Peer, len(prefixes))
	for _, p := range prefixes {
		class := policyapi.NoCIDRClass
		if k, ok := keyOf[p]; ok {
			class = ids[k]
		}
		if p.Bits() > 0 {
			if anc, ok := c.lookupPrefix(p.Addr(), p.Bits()-1); ok && anc == class {
				continue
			}
		}
		c.lpm[p] = class
	}
	var lens [2]map[int]bool
	lens[0], lens[1] = map[int]bool{}, map[int]bool{}
	for p := range c.lpm {
		lens[family(p.Addr())][p.Bits()] = true
	}
	for f := range lens {
		for l := range lens[f] {
			c.lens[f] = append(c.lens[f], l)
		}
		slices.SortFunc(c.lens[f], func(a, b int) int { return b - a })
	}
	return c
}

// excepted reports whether one of b's excepts contains all of p.
func excepted(b *policyapi.CIDRBlock, p netip.Prefix) bool {
	for _, e := range b.Except {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// setKey encodes a member set as a map key.
func setKey(set []int) string {
	b := make([]byte, 0, 4*len(set))
	for _, i := range set {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
	}
	return string(b)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// lookupPrefix returns the class of the longest emitted prefix of at most
// maxBits bits containing a. Used while c.lpm is being built (c.lens is
// not ready yet), so it tries every length.
func (c *cidrClasses) lookupPrefix(a netip.Addr, maxBits int) (policyapi.Peer, bool) {
	for l := maxBits; l >= 0; l-- {
		p, _ := a.Prefix(l)
		if class, ok := c.lpm[p]; ok {
			return class, true
		}
	}
	return 0, false
}

// classOf returns the class of address a (unmapped).
func (c *cidrClasses) classOf(a netip.Addr) policyapi.Peer {
	for _, l := range c.lens[family(a)] {
		p, _ := a.Prefix(l)
		if class, ok := c.lpm[p]; ok {
			return class
		}
	}
	return policyapi.NoCIDRClass
}

// classesOf returns the classes whose addresses lie in block b.
func (c *cidrClasses) classesOf(b *policyapi.CIDRBlock) []policyapi.Peer {
	return c.member[c.index[b.Key]]
}

// inBlock reports whether class contains the addresses of block b.
func (c *cidrClasses) inBlock(class policyapi.Peer, b *policyapi.CIDRBlock) bool {
	return slices.Contains(c.member[c.index[b.Key]], class)
}
