//go:build linux

package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/maps"
)

// Counters returns the packet and byte counts of lockstep_drops, summed
// over CPUs, by reason name (maps.Reason.String): every drop reason plus
// "allowed-new", the connections policy allowed, "allowed-node", the
// packets the node itself sent to pods whose ingress is isolated, and
// "service-no-backend", the connections to a Service without a ready
// backend, refused.
func (d *Datapath) Counters() (map[string]maps.Counter, error) {
	out := make(map[string]maps.Counter)
	for _, r := range maps.Reasons() {
		var perCPU []maps.Counter
		if err := d.counters.Lookup(uint32(r), &perCPU); err != nil {
			return nil, fmt.Errorf("read %s[%s]: %w", maps.CountersMap, r, err)
		}
		var sum maps.Counter
		for _, c := range perCPU {
			sum.Packets += c.Packets
			sum.Bytes += c.Bytes
		}
		out[r.String()] = sum
	}
	return out, nil
}

// Stats returns the number of entries of every map with keys, by map
// name. It walks the maps, so it costs in proportion to their size.
func (d *Datapath) Stats() (map[string]int, error) {
	out := make(map[string]int)
	for name, m := range map[string]*ebpf.Map{
		maps.EndpointsMap: d.endpoints,
		maps.PolicyMap:    d.policy,
		maps.IPCacheMap:   d.ipcache,
		maps.CIDRsMap:     d.cidrs,
		maps.ServicesMap:  d.services,
		maps.BackendsMap:  d.backends,
		maps.CTMap:        d.ct,
		maps.SvcCTMap:     d.svcCT,
	} {
		n, err := maps.Count(m)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// Generation returns lockstep_state.gen as last written by Apply.
func (d *Datapath) Generation() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mirror.gen
}

// Events opens a reader of verdict events (see maps.OpenEvents).
func (d *Datapath) Events() (*maps.EventReader, error) {
	return maps.OpenEvents(d.pinRoot)
}
