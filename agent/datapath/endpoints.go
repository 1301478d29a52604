//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// writeEndpoints writes parity q of lockstep_endpoints and lockstep_policy
// for every endpoint of want. A new endpoint's live flags say "isolated
// both ways" and it has no live rules: until the flip it drops what it
// would have dropped without an entry, except ARP and neighbour discovery.
//
// Rules go into the inner maps of parity q in place. The outer entries
// that must point at new inner maps (new endpoints, grown rule sets,
// maps adopted from a previous agent) are written together at the end,
// so that an Apply waits for at most one RCU grace period.
func (d *Datapath) writeEndpoints(want map[string]*policy.EndpointPolicy, ifindexes map[string]uint32, p, q int) error {
	m := &d.mirror
	var outer []outerWrite
	for name, ep := range want {
		idx := ifindexes[name]
		e := m.names[name]
		if e == nil || e.ifindex != idx {
			if prev := m.eps[idx]; prev != nil {
				// The ifindex changes hands: its drops so far were
				// the previous endpoint's.
				d.foldDenied(prev, p, true)
			}
			e = m.claim(name, idx, p)
		} else if old := e.src[p]; old != nil && old != ep && !sameIsolators(old, ep) {
			// Its drops so far were the policies' that isolated it.
			d.foldDenied(e, p, false)
		}
		e.mark = m.mark

		info := e.info
		info.Flags[q] = flagsOf(ep)
		info.HasV4, info.IPv4 = addrOf(ep.IPv4)
		info.HasV6, info.IPv6 = addrOf(ep.IPv6)
		if info != e.info {
			d.stats.entries++
			if err := d.endpoints.Put(idx, info); err != nil {
				d.closeOuterWrites(outer)
				return fmt.Errorf("write %s for %s: %w", bpfmaps.EndpointsMap, name, err)
			}
			e.info = info
		}
		ws, err := d.writeRules(e, ep, p, q)
		if err != nil {
			d.closeOuterWrites(outer)
			return fmt.Errorf("write rules of %s: %w", name, err)
		}
		outer = append(outer, ws...)
	}
	return d.putOuter(outer)
}

// claim returns the mirror entry of ifindex idx for endpoint name: the one
// already there (adopted from a previous agent, or left by an endpoint
// whose veth went away and whose ifindex the kernel reused), else a new
// one. A previous entry of name on another ifindex stays unmarked and is
// removed after the flip.
func (m *mirror) claim(name string, idx uint32, p int) *epEntry {
	e := m.eps[idx]
	if e == nil {
		e = &epEntry{ifindex: idx}
		e.info.Flags[p] = bpfmaps.IngressIsolated | bpfmaps.EgressIsolated
		e.info.Flags[p^1] = 0xff // forces the first write
		m.eps[idx] = e
	} else if e.name != "" && m.names[e.name] == e {
		delete(m.names, e.name)
	}
	e.name = name
	e.src = [2]*policy.EndpointPolicy{}
	m.names[name] = e
	return e
}

func flagsOf(ep *policy.EndpointPolicy) uint8 {
	var f uint8
	if ep.IngressIsolated {
		f |= bpfmaps.IngressIsolated
	}
	if ep.EgressIsolated {
		f |= bpfmaps.EgressIsolated
	}
	if !hasAnyPeerRule(ep, policyapi.Ingress) {
		f |= bpfmaps.IngressNoAny
	}
	if !hasAnyPeerRule(ep, policyapi.Egress) {
		f |= bpfmaps.EgressNoAny
	}
	// This agent's to_pod takes routed SYNs.
	return f | bpfmaps.RoutedSYN
}

// hasAnyPeerRule reports whether ep has a rule of dir for every peer
// (policyapi.PeerAny), on any protocol.
func hasAnyPeerRule(ep *policy.EndpointPolicy, dir policyapi.Direction) bool {
	for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP, policyapi.ProtoOther} {
		if _, ok := ep.Rules[policy.RuleKey{Peer: policyapi.PeerAny, Dir: dir, Proto: proto}]; ok {
			return true
		}
	}
	return false
}

func addrOf(a netip.Addr) (uint8, bpfmaps.Addr) {
	if !a.IsValid() {
		return 0, bpfmaps.Addr{}
	}
	return 1, bpfmaps.AddrFrom(a.Unmap())
}

// outerWrite is a lockstep_policy entry to point at a new inner map: that
// of e's parity, filled with the rules of src.
type outerWrite struct {
	e      *epEntry
	parity int
	im     *innerMap
	src    *policy.EndpointPolicy
}

// writeRules makes the inner map of {ifindex, q} hold ep's rules: in place
// when parity q has an inner map of its own that can hold them, else in a
// new inner map returned for putOuter. An endpoint without an inner map in
// the live parity gets an empty one there in the same outer write: it
// denies what no inner map denies, and later writes fill it in place.
func (d *Datapath) writeRules(e *epEntry, ep *policy.EndpointPolicy, p, q int) ([]outerWrite, error) {
	im := e.inner[q]
	if e.src[q] == ep && (im == nil || !im.unnamed || im.freedAt == d.rules.freedGen()) {
		return nil, nil
	}
	if im == nil && len(ep.Rules) == 0 {
		e.src[q] = ep // no inner map stands for no rules
		return nil, nil
	}
	if im != nil && im.known && fits(im.capacity, ruleEntries(ep.Rules)) {
		n, err := updateInner(im, ep.Rules, ep.Origins, &d.rules)
		d.stats.entries += n
		if err != nil {
			e.src[q] = nil
			return nil, err
		}
		e.src[q] = ep
		return nil, nil
	}
	nim, err := d.newInner(ep.Rules, ep.Origins)
	if err != nil {
		return nil, err
	}
	ws := []outerWrite{{e: e, parity: q, im: nim, src: ep}}
	if e.inner[p] == nil {
		empty, err := d.newInner(nil, nil)
		if err != nil {
			nim.close()
			return nil, err
		}
		ws = append(ws, outerWrite{e: e, parity: p, im: empty, src: e.src[p]})
	}
	return ws, nil
}

// putOuter points the outer entries of ws at their new inner maps, in one
// batch: the kernel waits for an RCU grace period after every update of a
// map-in-map, and once for a batch.
func (d *Datapath) putOuter(ws []outerWrite) error {
	if len(ws) == 0 {
		return nil
	}
	keys := make([]bpfmaps.PolicyOuterKey, len(ws))
	fds := make([]uint32, len(ws))
	for i, w := range ws {
		keys[i] = bpfmaps.PolicyOuterKey{Ifindex: w.e.ifindex, Parity: uint32(w.parity)}
		fds[i] = uint32(w.im.m.FD())
	}
	d.stats.entries += len(keys)
	d.stats.outer += len(keys)
	if err := putAll(d.policy, keys, fds); err != nil {
		// Some entries may point at the new maps already: forget what
		// each of them holds, so the next Apply writes it again.
		for _, w := range ws {
			w.im.close()
			w.e.setInner(w.parity, &innerMap{})
			w.e.src[w.parity] = nil
		}
		return fmt.Errorf("write %s: %w", bpfmaps.PolicyMap, err)
	}
	for _, w := range ws {
		w.e.setInner(w.parity, w.im)
		w.e.src[w.parity] = w.src
	}
	return nil
}

// closeOuterWrites releases the inner maps of writes that will not be made.
func (d *Datapath) closeOuterWrites(ws []outerWrite) {
	for _, w := range ws {
		w.im.close()
	}
}

// innerCapacity is the max_entries of a new inner map for n entries: room
// to grow by a quarter, rounded up to the hash table's own power of two
// buckets, so that most edits fit in place.
func innerCapacity(n int) int {
	c := 16
	for c < n+n/4 {
		c *= 2
	}
	return c
}

// fits reports whether an inner map of capacity is right for n entries: it
// holds them, and is not so oversized that its buckets are mostly waste.
func fits(capacity, n int) bool {
	return n <= capacity && capacity <= 8*innerCapacity(n)
}

// updateInner rewrites im in place to hold rules, each key with the id
// of its origin in t: deletes first, so the map never holds more than the
// larger of the two sets, then the entries that are new or differ. It
// returns how many entries it wrote or deleted; on error what im holds is
// unknown.
//
// A key whose ranges are the very slice im holds has the same origin too
// (see policy.Desired), so it costs one lookup, as it did before rules
// had origins; only the keys written look their origin up, and get an
// id. When im holds a rule written with id 0, every key with an origin is
// written again, to name it if an id is free now.
func updateInner(im *innerMap, rules map[policy.RuleKey][]policy.PortRange, origins map[policy.RuleKey]*policy.RuleOrigin, t *ruleTable) (int, error) {
	var keys []bpfmaps.PolicyKey
	var vals []bpfmaps.PolicyValue
	var del []bpfmaps.PolicyKey
	kept := 0 // keys of im.rules that rules has
	// force rewrites the keys of a map written while ids were exhausted,
	// once some were freed since: they may get one now. Until then the
	// map stays unnamed (the keys left as they are may hold id 0).
	freedAt := t.freedGen()
	force := im.unnamed && im.freedAt != freedAt
	unnamed := im.unnamed && !force
	for k, ranges := range rules {
		old, ok := im.rules[k]
		var o *policy.RuleOrigin
		if ok {
			kept++
			if !force && sameSlice(old, ranges) {
				continue
			}
			o = origins[k]
			if !(force && o != nil) && slices.Equal(old, ranges) && policy.SameOrigin(im.origins[k], o) {
				continue
			}
		} else {
			o = origins[k]
		}
		id, short := t.idOf(o)
		unnamed = unnamed || short
		start := len(keys)
		var err error
		if keys, vals, err = appendEntries(keys, vals, k, ranges, id); err != nil {
			return 0, err
		}
		if ok && (len(old) > bpfmaps.MaxPortRanges || len(ranges) > bpfmaps.MaxPortRanges) {
			// The chunks of the old ranges that the new ones lack go.
			oldKeys, _, _ := appendEntries(nil, nil, k, old, 0)
			for _, ok := range oldKeys {
				if !slices.Contains(keys[start:], ok) {
					del = append(del, ok)
				}
			}
		}
	}
	if kept < len(im.rules) {
		for k, old := range im.rules {
			if _, ok := rules[k]; !ok {
				oldKeys, _, _ := appendEntries(nil, nil, k, old, 0)
				del = append(del, oldKeys...)
			}
		}
	}
	im.known = false
	if err := deleteAll(im.m, del); err != nil {
		return len(del), fmt.Errorf("delete from inner policy map: %w", err)
	}
	if err := putAll(im.m, keys, vals); err != nil {
		return len(del) + len(keys), fmt.Errorf("write inner policy map: %w", err)
	}
	im.rules, im.origins, im.unnamed, im.freedAt, im.known = rules, origins, unnamed, freedAt, true
	return len(del) + len(keys), nil
}

// sameSlice reports whether a and b are the very same ranges: the same
// first element and length.
func sameSlice(a, b []policy.PortRange) bool {
	return len(a) > 0 && len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

func policyKey(k policy.RuleKey, chunk int) bpfmaps.PolicyKey {
	return bpfmaps.PolicyKey{Peer: uint32(k.Peer), Dir: uint8(k.Dir), Proto: k.Proto, Chunk: uint16(chunk)}
}

// ruleEntries is how many inner map entries rules take.
func ruleEntries(rules map[policy.RuleKey][]policy.PortRange) int {
	n := 0
	for _, ranges := range rules {
		if len(ranges) <= bpfmaps.MaxPortRanges {
			n++
			continue
		}
		n += 1 + len(buckets(ranges, bucketShift(ranges)))
	}
	return n
}

// appendEntries appends the entries of rule k (see bpfmaps.PolicyKey):
// one for at most bpfmaps.MaxPortRanges ranges, else chunk 0 and one per
// bucket that has ranges. The ranges are sorted, disjoint and not
// adjacent, as the compiler leaves them. Chunk 0 carries rule, the id of
// the key's origin (see ruleTable).
func appendEntries(keys []bpfmaps.PolicyKey, vals []bpfmaps.PolicyValue, k policy.RuleKey, ranges []policy.PortRange, rule uint32) ([]bpfmaps.PolicyKey, []bpfmaps.PolicyValue, error) {
	if len(ranges) > policy.MaxPortRanges {
		return keys, vals, fmt.Errorf("rule %+v has %d port ranges: %w (at most %d)", k, len(ranges), ErrTooManyRanges, policy.MaxPortRanges)
	}
	value := func(part []policy.PortRange) bpfmaps.PolicyValue {
		v := bpfmaps.PolicyValue{NRanges: uint32(len(part)), Rule: rule}
		for i, r := range part {
			v.Ranges[i] = bpfmaps.PortRange{Lo: r.Lo, Hi: r.Hi}
		}
		return v
	}
	if len(ranges) <= bpfmaps.MaxPortRanges {
		return append(keys, policyKey(k, 0)), append(vals, value(ranges)), nil
	}
	shift := bucketShift(ranges)
	keys = append(keys, policyKey(k, 0))
	vals = append(vals, bpfmaps.PolicyValue{NRanges: bpfmaps.RuleBucketed | uint32(shift)<<16, Rule: rule})
	for _, b := range buckets(ranges, shift) {
		keys, vals = append(keys, policyKey(k, 1+b.n)), append(vals, value(b.ranges))
	}
	return keys, vals, nil
}

// bucket is the ranges of a rule within ports [n<<shift, (n+1)<<shift),
// clipped to them.
type bucket struct {
	n      int
	ranges []policy.PortRange
}

// buckets splits sorted ranges into the buckets of 1<<shift ports that
// have any.
func buckets(ranges []policy.PortRange, shift int) []bucket {
	var out []bucket
	for _, r := range ranges {
		for n := int(r.Lo) >> shift; n <= int(r.Hi)>>shift; n++ {
			lo, hi := max(int(r.Lo), n<<shift), min(int(r.Hi), (n+1)<<shift-1)
			if len(out) == 0 || out[len(out)-1].n != n {
				out = append(out, bucket{n: n})
			}
			b := &out[len(out)-1]
			b.ranges = append(b.ranges, policy.PortRange{Lo: uint16(lo), Hi: uint16(hi)})
		}
	}
	return out
}

// bucketShift is the largest shift (the fewest buckets, 15 down to
// bpfmaps.MinBucketShift) whose buckets each hold at most
// bpfmaps.MaxPortRanges ranges.
func bucketShift(ranges []policy.PortRange) int {
	for shift := 15; shift > bpfmaps.MinBucketShift; shift-- {
		fit := true
		count, cur := 0, -1
		for _, r := range ranges {
			for n := int(r.Lo) >> shift; n <= int(r.Hi)>>shift && fit; n++ {
				if n != cur {
					cur, count = n, 0
				}
				count++
				fit = count <= bpfmaps.MaxPortRanges
			}
			if !fit {
				break
			}
		}
		if fit {
			return shift
		}
	}
	return bpfmaps.MinBucketShift
}

// newInner creates an inner policy map holding rules, each key with the
// id of its origin, sized by innerCapacity.
func (d *Datapath) newInner(rules map[policy.RuleKey][]policy.PortRange, origins map[policy.RuleKey]*policy.RuleOrigin) (*innerMap, error) {
	keys := make([]bpfmaps.PolicyKey, 0, len(rules))
	vals := make([]bpfmaps.PolicyValue, 0, len(rules))
	unnamed := false
	freedAt := d.rules.freedGen()
	for k, ranges := range rules {
		id, short := d.rules.idOf(origins[k])
		unnamed = unnamed || short
		var err error
		if keys, vals, err = appendEntries(keys, vals, k, ranges, id); err != nil {
			return nil, err
		}
	}
	spec := d.innerSpec.Copy()
	capacity := innerCapacity(len(keys))
	spec.MaxEntries = uint32(capacity)
	im, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("create inner policy map: %w", err)
	}
	d.stats.innerMaps++
	d.stats.entries += len(keys)
	if err := putAll(im, keys, vals); err != nil {
		im.Close()
		return nil, fmt.Errorf("fill inner policy map: %w", err)
	}
	return &innerMap{m: im, rules: rules, origins: origins, unnamed: unnamed, freedAt: freedAt, known: true, capacity: capacity}, nil
}

// removeEndpoints deletes every map entry of es (after the flip). The
// outer entries go in one batch, for one RCU grace period. It returns the
// endpoints whose entries are all gone.
func (d *Datapath) removeEndpoints(es []*epEntry) ([]*epEntry, error) {
	var keys []bpfmaps.PolicyOuterKey
	for _, e := range es {
		for parity := range 2 {
			if e.inner[parity] != nil {
				keys = append(keys, bpfmaps.PolicyOuterKey{Ifindex: e.ifindex, Parity: uint32(parity)})
			}
		}
	}
	d.stats.entries += len(keys)
	d.stats.outer += len(keys)
	if err := deleteAll(d.policy, keys); err != nil {
		return nil, fmt.Errorf("delete from %s: %w", bpfmaps.PolicyMap, err)
	}
	var done []*epEntry
	var errs []error
	for _, e := range es {
		// After the flip: the parity the endpoint was last enforced in
		// is the idle one now.
		d.foldDenied(e, int(d.mirror.gen&1)^1, true)
		e.setInner(0, nil)
		e.setInner(1, nil)
		d.stats.entries++
		if err := d.endpoints.Delete(e.ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete ifindex %d from %s: %w", e.ifindex, bpfmaps.EndpointsMap, err))
			continue
		}
		done = append(done, e)
	}
	return done, errors.Join(errs...)
}
