//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// mirror is what the maps hold, entry by entry and parity by parity, so
// that Apply writes only the copies that differ from the new state.
type mirror struct {
	gen  uint32 // lockstep_state.gen as last written
	mark uint64 // Apply counter: entries not marked by an Apply are gone

	ipc      map[netip.Addr]*ipcEntry    // lockstep_ipcache, by unmapped address
	trie     map[netip.Prefix]*cidrEntry // lockstep_cidrs, by 16-byte prefix
	trieLens map[int]int                 // prefix length → how many in trie
	cidrSet  [2]cidrSet                  // the CIDR table each parity's copies represent
	eps      map[uint32]*epEntry         // lockstep_endpoints and lockstep_policy, by ifindex
	names    map[string]*epEntry         // the same entries by host veth name

	svcs        map[bpfmaps.SvcKey]*svcEntry // lockstep_services and lockstep_backends, by frontend
	nextSvcID   uint32                       // the last frontend ID handed out
	orphanSlots []bpfmaps.BackendKey         // lockstep_backends entries of no frontend
	// svcsFrom is the policy.Desired Services map each parity was written
	// from, while that parity holds exactly its frontends (nil when
	// unknown): Apply skips the Service maps when want.Services is the
	// written parity's source.
	svcsFrom [2]map[policy.ServiceFrontend]*policy.ServiceEntry

	// addrsFrom and cidrsFrom are the policy.Desired maps each parity was
	// written from, while the table holds exactly that map's entries in
	// that parity and no other key (nil when unknown). Desired maps are
	// immutable, so Apply skips lockstep_ipcache when want.Addrs is the
	// written parity's source, and lockstep_cidrs when want.CIDRs is both
	// parities' (prefixes new to one parity take the other's value there).
	addrsFrom [2]map[netip.Addr]policy.AddrEntry
	cidrsFrom [2]map[netip.Prefix]policyapi.Peer
}

type ipcEntry struct {
	v    bpfmaps.IPCacheValue
	mark uint64
}

type cidrEntry struct {
	v bpfmaps.CIDRValue
}

// cidrSet is one parity's CIDR table: canonical prefix → class.
type cidrSet struct {
	valid bool
	m     map[netip.Prefix]uint32
	lens  []int // distinct prefix lengths, longest first
}

func newCIDRSet(m map[netip.Prefix]uint32) cidrSet {
	seen := make(map[int]bool)
	var lens []int
	for p := range m {
		if !seen[p.Bits()] {
			seen[p.Bits()] = true
			lens = append(lens, p.Bits())
		}
	}
	slices.Sort(lens)
	slices.Reverse(lens)
	return cidrSet{valid: true, m: m, lens: lens}
}

// lpm returns the class of the longest prefix of s containing pfx.
func (s *cidrSet) lpm(pfx netip.Prefix) uint32 {
	for _, l := range s.lens {
		if l > pfx.Bits() {
			continue
		}
		if c, ok := s.m[netip.PrefixFrom(pfx.Addr(), l).Masked()]; ok {
			return c
		}
	}
	return uint32(policyapi.NoCIDRClass)
}

// epEntry is one endpoint's lockstep_endpoints value and inner policy
// bpfmaps. name is empty for entries adopted from a previous agent and not
// claimed by an Apply yet.
type epEntry struct {
	name    string
	ifindex uint32
	info    bpfmaps.EndpointInfo
	inner   [2]*innerMap              // nil: no lockstep_policy entry for that parity
	src     [2]*policy.EndpointPolicy // what each parity was built from (fast path)
	mark    uint64
}

// innerMap is the inner policy map of one endpoint and parity. Each
// parity has its own, so that Apply rewrites the idle one in place and
// the outer map, whose every update waits for an RCU grace period, changes
// only when an endpoint appears, goes or outgrows its map. m is nil and
// known false for maps adopted from a previous agent, whose rules are not
// read back: Apply replaces them.
type innerMap struct {
	m     *ebpf.Map
	rules map[policy.RuleKey][]policy.PortRange // what m holds, when known
	// origins are the origins of rules' keys, whose ids m holds (when
	// known): the ids ruleTable gives them, or 0 while unnamed.
	origins map[policy.RuleKey]*policy.RuleOrigin
	// unnamed says some rule of m has an origin but id 0: the ids ran
	// out when it was written, and the next Apply names it if it can.
	unnamed bool
	// freedAt is ruleTable.freedGen when m was written: an unnamed m is
	// rewritten only once ids were freed since, not at every Apply.
	freedAt  uint64
	known    bool
	capacity int // m's max_entries
}

func (im *innerMap) close() {
	if im != nil && im.m != nil {
		im.m.Close()
	}
}

// setInner makes im the inner map of parity, closing the one it replaces
// (the outer map keeps it alive while it points at it).
func (e *epEntry) setInner(parity int, im *innerMap) {
	if old := e.inner[parity]; old != im {
		old.close()
	}
	e.inner[parity] = im
}

func (m *mirror) closeInners() {
	for _, e := range m.eps {
		e.setInner(0, nil)
		e.setInner(1, nil)
	}
}

func (m *mirror) addTrie(pfx netip.Prefix, v bpfmaps.CIDRValue) {
	if _, ok := m.trie[pfx]; !ok {
		m.trieLens[pfx.Bits()]++
	}
	m.trie[pfx] = &cidrEntry{v: v}
}

func (m *mirror) delTrie(pfx netip.Prefix) {
	if _, ok := m.trie[pfx]; ok {
		delete(m.trie, pfx)
		if m.trieLens[pfx.Bits()]--; m.trieLens[pfx.Bits()] == 0 {
			delete(m.trieLens, pfx.Bits())
		}
	}
}

// trieLookup returns what a packet gets today for the addresses of pfx not
// covered by longer prefixes: the value of the longest prefix in the trie
// containing pfx (all NoCIDRClass when none does).
func (m *mirror) trieLookup(pfx netip.Prefix) bpfmaps.CIDRValue {
	best := -1
	var v bpfmaps.CIDRValue
	for l := range m.trieLens {
		if l > pfx.Bits() || l <= best {
			continue
		}
		if e, ok := m.trie[netip.PrefixFrom(pfx.Addr(), l).Masked()]; ok {
			best, v = l, e.v
		}
	}
	if best < 0 {
		v.CIDRClass = [2]uint32{uint32(policyapi.NoCIDRClass), uint32(policyapi.NoCIDRClass)}
	}
	return v
}

// canonPrefix returns pfx as the trie stores it: 16-byte address, IPv4 as
// ::ffff:0:0/96 plus the IPv4 length.
func canonPrefix(pfx netip.Prefix) netip.Prefix {
	pfx = pfx.Masked()
	if pfx.Addr().Is4() {
		return netip.PrefixFrom(netip.AddrFrom16(pfx.Addr().As16()), pfx.Bits()+96)
	}
	return pfx
}

// hostPrefix returns a as a /128 canonical prefix.
func hostPrefix(a netip.Addr) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16(a.As16()), 128)
}

// adopt reads the pinned maps into the mirror, so the first Apply after a
// restart is incremental too and removes what the previous agent left
// behind that the new state does not have.
func (d *Datapath) adopt() error {
	m := &d.mirror
	*m = mirror{
		ipc:      make(map[netip.Addr]*ipcEntry),
		trie:     make(map[netip.Prefix]*cidrEntry),
		trieLens: make(map[int]int),
		eps:      make(map[uint32]*epEntry),
		names:    make(map[string]*epEntry),
	}
	var st bpfmaps.State
	if err := d.state.Lookup(uint32(0), &st); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.StateMap, err)
	}
	m.gen = st.Gen

	var a bpfmaps.Addr
	var iv bpfmaps.IPCacheValue
	it := d.ipcache.Iterate()
	for it.Next(&a, &iv) {
		m.ipc[a.Netip()] = &ipcEntry{v: iv}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.IPCacheMap, err)
	}

	var ck bpfmaps.CIDRKey
	var cv bpfmaps.CIDRValue
	it = d.cidrs.Iterate()
	for it.Next(&ck, &cv) {
		m.addTrie(netip.PrefixFrom(netip.AddrFrom16(ck.Addr), int(ck.PrefixLen)), cv)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.CIDRsMap, err)
	}
	if len(m.trie) == 0 {
		// No prefix: both parities' tables are known to be empty. An
		// Apply that fails on a full trie can then have what it left
		// removed by the next, also when it was the first (writeCIDRs
		// removes leftovers only beside a live table it knows).
		m.cidrSet = [2]cidrSet{newCIDRSet(map[netip.Prefix]uint32{}), newCIDRSet(map[netip.Prefix]uint32{})}
	}

	var ifindex uint32
	var info bpfmaps.EndpointInfo
	it = d.endpoints.Iterate()
	for it.Next(&ifindex, &info) {
		m.eps[ifindex] = &epEntry{ifindex: ifindex, info: info}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.EndpointsMap, err)
	}

	if err := d.adoptServices(); err != nil {
		return err
	}

	keys, err := outerKeys(d.policy)
	if err != nil {
		return err
	}
	for _, k := range keys {
		e := m.eps[k.Ifindex]
		if e == nil {
			e = &epEntry{ifindex: k.Ifindex}
			m.eps[k.Ifindex] = e
		}
		e.setInner(int(k.Parity&1), &innerMap{})
	}
	return nil
}

func outerKeys(outer *ebpf.Map) ([]bpfmaps.PolicyOuterKey, error) {
	var keys []bpfmaps.PolicyOuterKey
	var k bpfmaps.PolicyOuterKey
	var prev any
	for {
		err := outer.NextKey(prev, &k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", bpfmaps.PolicyMap, err)
		}
		keys = append(keys, k)
		prev = k
	}
}
