//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	bpfmaps "lockstep.dev/lockstep/maps"
)

// writeEndpoints writes parity q of lockstep_endpoints and lockstep_policy
// for every endpoint of want. A new endpoint's live flags say "isolated
// both ways" and it has no live rules: until the flip it drops what it
// would have dropped without an entry, except ARP and neighbour discovery.
func (d *Datapath) writeEndpoints(want map[string]*policy.EndpointPolicy, ifindexes map[string]uint32, p, q int) error {
	m := &d.mirror
	for name, ep := range want {
		idx := ifindexes[name]
		e := m.names[name]
		if e == nil || e.ifindex != idx {
			e = m.claim(name, idx, p)
		}
		e.mark = m.mark

		info := e.info
		info.Flags[q] = flagsOf(ep)
		info.HasV4, info.IPv4 = addrOf(ep.IPv4)
		info.HasV6, info.IPv6 = addrOf(ep.IPv6)
		if info != e.info {
			if err := d.endpoints.Put(idx, info); err != nil {
				return fmt.Errorf("write %s for %s: %w", bpfmaps.EndpointsMap, name, err)
			}
			e.info = info
		}
		if err := d.writeRules(e, ep, p, q); err != nil {
			return fmt.Errorf("write rules of %s: %w", name, err)
		}
	}
	return nil
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
	return f
}

func addrOf(a netip.Addr) (uint8, bpfmaps.Addr) {
	if !a.IsValid() {
		return 0, bpfmaps.Addr{}
	}
	return 1, bpfmaps.AddrFrom(a.Unmap())
}

// writeRules points {ifindex, q} of lockstep_policy at an inner map holding
// ep's rules: the one already there, the live parity's when the rules did
// not change, or a new one.
func (d *Datapath) writeRules(e *epEntry, ep *policy.EndpointPolicy, p, q int) error {
	if e.src[q] == ep {
		return nil
	}
	if sameRules(e.inner[q], ep.Rules) {
		e.src[q] = ep
		return nil
	}
	im := e.inner[p]
	if !sameRules(im, ep.Rules) {
		var err error
		if im, err = d.newInner(ep.Rules); err != nil {
			return err
		}
	}
	if err := d.setOuter(e.ifindex, q, im); err != nil {
		if im != nil && im.refs == 0 {
			im.m.Close()
		}
		return err
	}
	e.setInner(q, im)
	e.src[q] = ep
	return nil
}

// sameRules reports whether im holds exactly rules; a nil im stands for
// no rules at all.
func sameRules(im *innerMap, rules map[policy.RuleKey][]policy.PortRange) bool {
	if im == nil {
		return len(rules) == 0
	}
	if !im.known || len(im.rules) != len(rules) {
		return false
	}
	for k, a := range im.rules {
		b, ok := rules[k]
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
	}
	return true
}

// newInner creates an inner policy map holding rules (nil for no rules:
// no inner map denies everything, like an empty one).
func (d *Datapath) newInner(rules map[policy.RuleKey][]policy.PortRange) (*innerMap, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	keys := make([]bpfmaps.PolicyKey, 0, len(rules))
	vals := make([]bpfmaps.PolicyValue, 0, len(rules))
	for k, ranges := range rules {
		if len(ranges) > bpfmaps.MaxPortRanges {
			return nil, fmt.Errorf("rule %+v has %d port ranges: %w (at most %d)", k, len(ranges), ErrTooManyRanges, bpfmaps.MaxPortRanges)
		}
		v := bpfmaps.PolicyValue{NRanges: uint32(len(ranges))}
		for i, r := range ranges {
			v.Ranges[i] = bpfmaps.PortRange{Lo: r.Lo, Hi: r.Hi}
		}
		keys = append(keys, bpfmaps.PolicyKey{Peer: uint32(k.Peer), Dir: uint8(k.Dir), Proto: k.Proto})
		vals = append(vals, v)
	}
	spec := d.innerSpec.Copy()
	spec.MaxEntries = uint32(len(rules))
	im, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("create inner policy map: %w", err)
	}
	if err := putAll(im, keys, vals); err != nil {
		im.Close()
		return nil, fmt.Errorf("fill inner policy map: %w", err)
	}
	return &innerMap{m: im, rules: rules, known: true}, nil
}

// setOuter points {ifindex, parity} at im, or deletes it for nil.
func (d *Datapath) setOuter(ifindex uint32, parity int, im *innerMap) error {
	k := bpfmaps.PolicyOuterKey{Ifindex: ifindex, Parity: uint32(parity)}
	if im == nil {
		if err := d.policy.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete %s %+v: %w", bpfmaps.PolicyMap, k, err)
		}
		return nil
	}
	if err := d.policy.Put(k, uint32(im.m.FD())); err != nil {
		return fmt.Errorf("write %s %+v: %w", bpfmaps.PolicyMap, k, err)
	}
	return nil
}

// removeEndpoint deletes every map entry of e (after the flip).
func (d *Datapath) removeEndpoint(e *epEntry) error {
	for parity := range 2 {
		if e.inner[parity] == nil {
			continue
		}
		if err := d.setOuter(e.ifindex, parity, nil); err != nil {
			return err
		}
		e.setInner(parity, nil)
	}
	if err := d.endpoints.Delete(e.ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete ifindex %d from %s: %w", e.ifindex, bpfmaps.EndpointsMap, err)
	}
	return nil
}
