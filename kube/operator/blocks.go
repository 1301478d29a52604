package operator

import (
	"fmt"
	"net/netip"
	"slices"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// maxCapacity caps the address count of one block: an IPv6 block can hold
// more addresses than an int64 counts, and no node will ever allocate
// 2^62 of them.
const maxCapacity = int64(1) << 62

// capacity returns how many addresses p holds, capped at maxCapacity.
func capacity(p netip.Prefix) int64 {
	bits := p.Addr().BitLen() - p.Bits()
	if bits >= 62 {
		return maxCapacity
	}
	return int64(1) << bits
}

// family is an address family: 4 or 6.
type family int

func familyOf(p netip.Prefix) family {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

func (f family) String() string { return fmt.Sprintf("IPv%d", int(f)) }

// addPow2 returns a + 2^bit (bit 0 is the least significant), and false if
// that overflows the address family.
func addPow2(a netip.Addr, bit int) (netip.Addr, bool) {
	b := a.AsSlice()
	i := len(b) - 1 - bit/8
	if i < 0 {
		return netip.Addr{}, false
	}
	carry := uint(1) << (bit % 8)
	for ; i >= 0 && carry != 0; i-- {
		sum := uint(b[i]) + carry
		b[i] = byte(sum)
		carry = sum >> 8
	}
	if carry != 0 {
		return netip.Addr{}, false
	}
	out, _ := netip.AddrFromSlice(b)
	return out, true
}

// after returns the first address past the end of p, and false if p ends
// at the top of its family.
func after(p netip.Prefix) (netip.Addr, bool) {
	p = p.Masked()
	return addPow2(p.Addr(), p.Addr().BitLen()-p.Bits())
}

// heldSet is every address range some NodeIPAM holds, by prefix length, so
// that whether a candidate block overlaps any of them is a few map lookups
// whatever their sizes.
type heldSet struct {
	bySize map[int]map[netip.Prefix]string // prefix -> holder
	// within caches, per block size s, the held prefixes longer than s
	// masked to s: a candidate of size s contains one exactly when it is
	// a key.
	within map[int]map[netip.Prefix]string
}

func newHeldSet() *heldSet {
	return &heldSet{bySize: map[int]map[netip.Prefix]string{}, within: map[int]map[netip.Prefix]string{}}
}

// add records that holder holds p.
func (h *heldSet) add(p netip.Prefix, holder string) {
	p = p.Masked()
	m := h.bySize[p.Bits()]
	if m == nil {
		m = map[netip.Prefix]string{}
		h.bySize[p.Bits()] = m
	}
	m[p] = holder
	for s, w := range h.within {
		if p.Bits() > s {
			w[netip.PrefixFrom(p.Addr(), s).Masked()] = holder
		}
	}
}

// overlap returns a held prefix that overlaps c and its holder.
func (h *heldSet) overlap(c netip.Prefix) (netip.Prefix, string, bool) {
	c = c.Masked()
	// Held prefixes as large as c or larger: c's own prefix masked to
	// their length is the only one that can overlap it.
	for size, m := range h.bySize {
		if size > c.Bits() {
			continue
		}
		outer := netip.PrefixFrom(c.Addr(), size).Masked()
		if holder, ok := m[outer]; ok {
			return outer, holder, true
		}
	}
	// Smaller held prefixes inside c.
	w, ok := h.within[c.Bits()]
	if !ok {
		w = map[netip.Prefix]string{}
		for size, m := range h.bySize {
			if size <= c.Bits() {
				continue
			}
			for p, holder := range m {
				w[netip.PrefixFrom(p.Addr(), c.Bits()).Masked()] = holder
			}
		}
		h.within[c.Bits()] = w
	}
	if holder, ok := w[c]; ok {
		return c, holder, true
	}
	return netip.Prefix{}, "", false
}

// freeBlocks walks, in address order, the blocks of one pool that nothing
// holds. Blocks it returns are added to the held set, so two walkers (and
// two calls) never return the same block.
type freeBlocks struct {
	ranges []netip.Prefix
	size   int
	held   *heldSet
	i      int        // index into ranges
	next   netip.Addr // next candidate's address in ranges[i]; invalid: start of range
}

func newFreeBlocks(ranges []netip.Prefix, size int, held *heldSet) *freeBlocks {
	return &freeBlocks{ranges: ranges, size: size, held: held}
}

// peek returns the next free block without taking it.
func (f *freeBlocks) peek() (netip.Prefix, bool) {
	for f.i < len(f.ranges) {
		r := f.ranges[f.i]
		if !f.next.IsValid() {
			f.next = r.Masked().Addr()
		}
		c := netip.PrefixFrom(f.next, f.size)
		if !r.Contains(c.Addr()) {
			f.i, f.next = f.i+1, netip.Addr{}
			continue
		}
		h, _, ok := f.held.overlap(c)
		if !ok {
			return c, true
		}
		// Skip past whichever is larger, the held prefix or the candidate.
		skip := c
		if h.Bits() < c.Bits() {
			skip = h
		}
		n, ok := after(skip)
		if !ok {
			f.i, f.next = f.i+1, netip.Addr{}
			continue
		}
		f.next = n
	}
	return netip.Prefix{}, false
}

// take returns the next free block and marks it held by holder.
func (f *freeBlocks) take(holder string) (netip.Prefix, bool) {
	c, ok := f.peek()
	if !ok {
		return netip.Prefix{}, false
	}
	f.held.add(c, holder)
	return c, true
}

// poolInfo is an IPPool's spec, parsed and checked.
type poolInfo struct {
	pool   *v1alpha1.IPPool
	ranges []netip.Prefix
	family family
	size   int
	// problem is why no block may be cut from the pool, empty when it is
	// Ready; reason is the condition reason that goes with it.
	reason, problem string
}

// Reasons of the IPPool Ready condition.
const (
	reasonReady       = "BlocksAvailable"
	reasonInvalidSpec = "InvalidSpec"
	reasonOverlap     = "Overlap"
)

func (p *poolInfo) ready() bool { return p.problem == "" }

// parsePools checks every pool's spec and, across pools, that no two
// overlap: blocks cut from overlapping pools could be handed out twice, so
// both are refused until one is fixed. The result is sorted by name.
func parsePools(pools []*v1alpha1.IPPool) []*poolInfo {
	out := make([]*poolInfo, 0, len(pools))
	for _, pool := range pools {
		info := &poolInfo{pool: pool, size: int(pool.Spec.BlockSize), reason: reasonReady}
		for _, c := range pool.Spec.CIDRs {
			p, err := c.Prefix()
			if err != nil {
				info.reason, info.problem = reasonInvalidSpec, err.Error()
				break
			}
			f := familyOf(p)
			if len(info.ranges) > 0 && f != info.family {
				info.reason, info.problem = reasonInvalidSpec, "CIDRs of more than one address family; make one pool per family"
				break
			}
			if info.size < p.Bits() || info.size > p.Addr().BitLen() {
				info.reason, info.problem = reasonInvalidSpec, fmt.Sprintf("blockSize %d does not fit range %s", info.size, c)
				break
			}
			info.family = f
			info.ranges = append(info.ranges, p)
		}
		if info.problem == "" && len(info.ranges) == 0 {
			info.reason, info.problem = reasonInvalidSpec, "no CIDRs"
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b *poolInfo) int { return cmpString(a.pool.Name, b.pool.Name) })
	for i, a := range out {
		for _, b := range out[i+1:] {
			for _, ra := range a.ranges {
				for _, rb := range b.ranges {
					if ra.Overlaps(rb) {
						a.reason, a.problem = reasonOverlap, fmt.Sprintf("range %s overlaps pool %s's %s", ra, b.pool.Name, rb)
						b.reason, b.problem = reasonOverlap, fmt.Sprintf("range %s overlaps pool %s's %s", rb, a.pool.Name, ra)
					}
				}
			}
		}
	}
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
