//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// Apply makes want the enforced state, make-before-break: it writes the
// idle parity's copy of every entry that differs, flips lockstep_state.gen
// with one update, then deletes the entries want no longer has. The
// Service frontends and backends are part of the same generation.
//
// Every endpoint of want must have been attached (Attach) by this Datapath;
// otherwise Apply changes nothing and returns an error wrapping
// ErrNotAttached that names them. A state with more Service frontends or
// backends than the maps hold changes nothing either: the error wraps
// ErrServiceCapacity. An error before the flip leaves the
// enforced state as it was; the next Apply repairs the idle copies.
//
// Apply keeps references to want and the maps in it: the caller must not
// modify them afterwards (build a new Desired instead, reusing unchanged
// maps and *EndpointPolicy values, which Apply then recognises without
// comparing). A one-rule change handed over that way writes the rule and
// the generation. It waits only when the previous flip is less than an RCU
// grace period old (waitQuiescent), until packets that read the previous
// generation are done. With Options.LeaveServicesToKubeProxy it applies
// want without its Services.
func (d *Datapath) Apply(want *policy.Desired) error {
	d.mu.Lock()
	defer d.mu.Unlock()

	if d.leaveServices && !sameMap(want.Services, noServices) {
		// A copy: want is the compiler's, shared with the enforcer.
		w := *want
		w.Services, w.ServicesBase, w.ServicesChanged = noServices, nil, nil
		want = &w
	}
	if d.readBack {
		d.mirror.closeInners()
		if err := d.adopt(); err != nil {
			return fmt.Errorf("apply policy: %w", err)
		}
		d.readBack = false
	}
	// The wait releases d.mu: resolve the endpoints after it, so that an
	// Attach or Detach meanwhile is seen.
	if err := d.waitQuiescent(); err != nil {
		return err
	}
	ifindexes, err := d.resolve(want)
	if err != nil {
		return err
	}
	m := &d.mirror
	p := int(m.gen & 1) // live parity
	q := p ^ 1          // the parity being written
	var svcs svcPlan
	if !sameMap(m.svcsFrom[q], want.Services) {
		if svcs, err = d.wantServices(want, m.svcsFrom[q]); err != nil {
			return err
		}
	}
	m.mark++
	d.stats = applyStats{}

	flipped := false
	defer func() {
		if !flipped {
			// Parity q may hold entries that the new state added and
			// that no cleanup removed: its tables no longer hold
			// exactly one source.
			m.cidrsFrom[q], m.addrsFrom[q], m.svcsFrom[q] = nil, nil, nil
		}
	}()
	canon, err := d.writeCIDRs(want.CIDRs, p, q)
	if err != nil {
		return err
	}
	goneAddrs, err := d.writeIPCache(want.Addrs, p, q)
	if err != nil {
		return err
	}
	unnamedBefore := d.rules.exhausted()
	if err := d.writeEndpoints(want.Endpoints, ifindexes, p, q); err != nil {
		return err
	}
	unnamed := d.rules.exhausted() > unnamedBefore
	if err := d.writeServices(want.Services, svcs, p, q); err != nil {
		return err
	}
	if d.beforeFlip != nil {
		d.beforeFlip()
	}
	if err := d.flip(); err != nil {
		return err
	}
	flipped = true
	d.publishIsolators()
	d.kickSettler()
	err = d.cleanup(canon, goneAddrs)
	d.reclaimRuleIDs(unnamed)
	d.noteUnnamed(unnamed)
	return err
}

// Invalidate makes the next Apply read the maps back, as Load does with
// the maps of a previous agent, and compare the new state with what they
// hold rather than with what lockstep last wrote: entries changed, added
// or removed behind lockstep's back are then repaired, and rules maps it
// cannot vouch for are replaced. It implements enforcer.Invalidator, which
// the periodic resync calls.
func (d *Datapath) Invalidate() {
	d.mu.Lock()
	d.readBack = true
	d.mu.Unlock()
}

// applyStats counts what one Apply did to the maps, so tests can bound
// the cost of a change: Apply's latency follows these counts.
type applyStats struct {
	// entries is how many map entries were written or deleted, the
	// generation and inner map entries included.
	entries int
	// outer is how many lockstep_policy entries were written or deleted:
	// the kernel follows each syscall on a map-in-map with an RCU grace
	// period (milliseconds), once per batch.
	outer int
	// innerMaps is how many inner policy maps were created.
	innerMaps int
	// svc is how many lockstep_services and lockstep_backends entries
	// were written or deleted (also counted in entries).
	svc int
	// svcLooked is how many Service frontends Apply looked at to write
	// them: all it translates, or those the compiler said changed.
	svcLooked int
}

// resolve maps every endpoint of want to the ifindex Attach recorded.
func (d *Datapath) resolve(want *policy.Desired) (map[string]uint32, error) {
	out := make(map[string]uint32, len(want.Endpoints))
	var missing []string
	for name := range want.Endpoints {
		idx, ok := d.attached[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		out[name] = uint32(idx)
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("apply policy: %w: %s (call Attach first)", ErrNotAttached, strings.Join(missing, ", "))
	}
	return out, nil
}

// writeCIDRs writes parity q of lockstep_cidrs. A prefix in the trie that
// parity q's table lacks gets, in slot q, the class of the longest prefix of
// q's table containing it, so a lookup in either parity is exact while the
// trie holds the union of both tables. It returns q's canonical table.
//
// When both parities were written from want itself, the trie holds exactly
// want and there is nothing to write.
func (d *Datapath) writeCIDRs(want map[netip.Prefix]policyapi.Peer, p, q int) (map[netip.Prefix]uint32, error) {
	m := &d.mirror
	if want != nil && sameMap(m.cidrsFrom[q], want) && sameMap(m.cidrsFrom[p], want) && m.cidrSet[q].valid {
		return m.cidrSet[q].m, nil
	}
	canon := make(map[netip.Prefix]uint32, len(want))
	for pfx, class := range want {
		// IPv4 is keyed IPv4-mapped: a mapped IPv6 prefix would be
		// the key of an IPv4 one, whichever came last winning.
		if err := policyapi.CheckNotMapped(pfx); err != nil {
			return nil, fmt.Errorf("apply policy: %w", err)
		}
		canon[canonPrefix(pfx)] = uint32(class)
	}
	// Prefixes an apply that failed left behind, in neither the live
	// parity's table nor the new one, go first: the trie may be full of
	// them (a state too large for it), and their live slot repeats what
	// the live table's own prefixes give, so no live lookup changes.
	if live := m.cidrSet[p]; live.valid && len(m.trie) > len(live.m) {
		for pfx := range m.trie {
			if _, ok := canon[pfx]; ok {
				continue
			}
			if _, ok := live.m[pfx]; ok {
				continue
			}
			k := bpfmaps.CIDRKey{PrefixLen: uint32(pfx.Bits()), Addr: bpfmaps.Addr(pfx.Addr().As16())}
			d.stats.entries++
			if err := d.cidrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, fmt.Errorf("delete %s from %s: %w", pfx, bpfmaps.CIDRsMap, err)
			}
			m.delTrie(pfx)
		}
	}
	if m.cidrSet[q].valid && maps.Equal(canon, m.cidrSet[q].m) {
		canon = m.cidrSet[q].m // every trie entry's slot q is already right
	} else {
		set := newCIDRSet(canon)
		for pfx, e := range m.trie {
			v := e.v
			v.CIDRClass[q] = set.lpm(pfx)
			if v != e.v {
				if err := d.putCIDR(pfx, v); err != nil {
					return nil, err
				}
			}
		}
		m.cidrSet[q] = set
	}
	for pfx, class := range canon {
		if _, ok := m.trie[pfx]; ok {
			continue
		}
		// What the live parity sees for pfx today, unchanged.
		v := m.trieLookup(pfx)
		v.CIDRClass[q] = class
		if err := d.putCIDR(pfx, v); err != nil {
			return nil, err
		}
	}
	m.cidrsFrom[q] = want
	return canon, nil
}

func (d *Datapath) putCIDR(pfx netip.Prefix, v bpfmaps.CIDRValue) error {
	k := bpfmaps.CIDRKey{PrefixLen: uint32(pfx.Bits()), Addr: bpfmaps.Addr(pfx.Addr().As16())}
	d.stats.entries++
	if err := d.cidrs.Put(k, v); err != nil {
		return fmt.Errorf("write %s %s: %w", bpfmaps.CIDRsMap, pfx, err)
	}
	d.mirror.addTrie(pfx, v)
	return nil
}

// writeIPCache writes parity q of lockstep_ipcache. A new address gets, in
// the live slot, what the live parity sees for it today (world and its
// CIDR class); an address want lacks gets the same in slot q and is
// returned for deletion after the flip.
//
// When parity q was written from want itself, every copy of q is already
// right and the table holds no other address: nothing to walk.
func (d *Datapath) writeIPCache(want map[netip.Addr]policy.AddrEntry, p, q int) ([]netip.Addr, error) {
	m := &d.mirror
	if want != nil && sameMap(m.addrsFrom[q], want) {
		return nil, nil
	}
	var keys []bpfmaps.Addr
	var vals []bpfmaps.IPCacheValue
	var ents []*ipcEntry
	for a, ae := range want {
		if a.Is4In6() {
			a = a.Unmap()
		}
		e := m.ipc[a]
		if e == nil {
			cur := m.trieLookup(hostPrefix(a))
			e = &ipcEntry{}
			e.v.Identity[p] = uint32(policyapi.PeerWorld)
			e.v.CIDRClass[p] = cur.CIDRClass[p]
			e.v.Identity[q] = ^uint32(0) // forces the write below
			m.ipc[a] = e
		}
		e.mark = m.mark
		if e.v.Identity[q] == uint32(ae.Identity) && e.v.CIDRClass[q] == uint32(ae.CIDRClass) {
			continue
		}
		v := e.v
		v.Identity[q], v.CIDRClass[q] = uint32(ae.Identity), uint32(ae.CIDRClass)
		keys = append(keys, bpfmaps.AddrFrom(a))
		vals = append(vals, v)
		ents = append(ents, e)
	}
	var gone []netip.Addr
	if len(m.ipc) > len(want) {
		for a, e := range m.ipc {
			if e.mark == m.mark {
				continue
			}
			gone = append(gone, a)
			v := e.v
			v.Identity[q] = uint32(policyapi.PeerWorld)
			v.CIDRClass[q] = m.trieLookup(hostPrefix(a)).CIDRClass[q]
			if v != e.v {
				keys = append(keys, bpfmaps.AddrFrom(a))
				vals = append(vals, v)
				ents = append(ents, e)
			}
		}
	}
	d.stats.entries += len(keys)
	if err := putAll(d.ipcache, keys, vals); err != nil {
		// Entries new to the mirror may or may not be in the map: forget
		// their copies so the next Apply writes them again.
		for _, e := range ents {
			e.v.Identity[q] = ^uint32(0)
		}
		return nil, fmt.Errorf("write %s: %w", bpfmaps.IPCacheMap, err)
	}
	for i, e := range ents {
		e.v = vals[i]
	}
	// Parity p keeps its source only if it was want too: otherwise the
	// addresses want added hold the live view in p, not p's source.
	if !sameMap(m.addrsFrom[p], want) {
		m.addrsFrom[p] = nil
	}
	m.addrsFrom[q] = want
	return gone, nil
}

// noServices is the Services Apply writes with
// Options.LeaveServicesToKubeProxy: always the same empty map, so that the
// Apply after the first finds each parity written from it and looks no
// further. Never modified.
var noServices = map[policy.ServiceFrontend]*policy.ServiceEntry{}

// sameMap reports whether a and b are the same map object: for immutable
// policy.Desired maps, the same content.
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return a != nil && b != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// putAll writes keys[i] → vals[i], in one batch when the kernel can.
func putAll[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	if len(keys) > 1 {
		_, err := m.BatchUpdate(keys, vals, nil)
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
	}
	for i := range keys {
		if err := m.Put(keys[i], vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// deleteAll deletes keys from m, in one batch when the kernel can; keys
// already gone are not an error.
func deleteAll[K any](m *ebpf.Map, keys []K) error {
	_, err := deleteCounting(m, keys)
	return err
}

// deleteCounting is deleteAll that also returns how many of keys it
// deleted: those not already gone. The conntrack tables' eviction count
// needs it (ctevict.go).
func deleteCounting[K any](m *ebpf.Map, keys []K) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n := 0
	if len(keys) > 1 {
		done, err := m.BatchDelete(keys, nil)
		if err == nil {
			return done, nil
		}
		// Not supported (nothing deleted), or a key was missing and the
		// batch stopped there, after deleting those before it: delete
		// the rest one by one.
		if done > 0 && done < len(keys) {
			n, keys = done, keys[done:]
		}
	}
	for _, k := range keys {
		err := m.Delete(k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// flip makes the written parity live with one map update. Only the agent
// writes lockstep_state (the monitor flag has a map of its own), so the
// value is written whole, without reading it first.
func (d *Datapath) flip() error {
	st := bpfmaps.State{Gen: d.mirror.gen + 1}
	d.stats.entries++
	if err := d.state.Put(uint32(0), st); err != nil {
		return fmt.Errorf("flip generation: %w", err)
	}
	d.mirror.gen = st.Gen
	return nil
}

// cleanup deletes, after the flip, what the new state no longer has.
func (d *Datapath) cleanup(canon map[netip.Prefix]uint32, goneAddrs []netip.Addr) error {
	m := &d.mirror
	var errs []error
	d.stats.entries += len(goneAddrs)
	for _, a := range goneAddrs {
		if err := d.ipcache.Delete(bpfmaps.AddrFrom(a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete %s from %s: %w", a, bpfmaps.IPCacheMap, err))
			continue
		}
		delete(m.ipc, a)
	}
	if len(errs) > 0 {
		// The table holds addresses no source has.
		m.addrsFrom = [2]map[netip.Addr]policy.AddrEntry{}
	}
	if len(m.trie) > len(canon) {
		for pfx := range m.trie {
			if _, ok := canon[pfx]; ok {
				continue
			}
			k := bpfmaps.CIDRKey{PrefixLen: uint32(pfx.Bits()), Addr: bpfmaps.Addr(pfx.Addr().As16())}
			d.stats.entries++
			if err := d.cidrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("delete %s from %s: %w", pfx, bpfmaps.CIDRsMap, err))
				m.cidrsFrom = [2]map[netip.Prefix]policyapi.Peer{}
				continue
			}
			m.delTrie(pfx)
		}
	}
	var gone []*epEntry
	for _, e := range m.eps {
		if e.mark != m.mark {
			gone = append(gone, e)
		}
	}
	if len(gone) > 0 {
		removed, err := d.removeEndpoints(gone)
		if err != nil {
			errs = append(errs, err)
		}
		for _, e := range removed {
			delete(m.eps, e.ifindex)
			if e.name != "" && m.names[e.name] == e {
				delete(m.names, e.name)
			}
		}
		d.forgetEndpointsCT(removed)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove stale entries after applying generation %d: %w", m.gen, err)
	}
	return nil
}
