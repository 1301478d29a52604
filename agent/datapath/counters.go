//go:build linux

package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/bpfmaps"
)

// Counters returns the packet and byte counts of lockstep_drops, summed
// over CPUs, by reason name (bpfmaps.Reason.String): every drop reason plus
// "allowed-new", the connections policy allowed, "allowed-node", the
// packets the node itself sent to pods whose ingress is isolated, and
// "service-no-backend", the connections to a Service without a ready
// backend, refused, or without one on this node under
// internalTrafficPolicy Local, dropped.
func (d *Datapath) Counters() (map[string]bpfmaps.Counter, error) {
	out := make(map[string]bpfmaps.Counter)
	for _, r := range bpfmaps.Reasons() {
		var perCPU []bpfmaps.Counter
		if err := d.counters.Lookup(uint32(r), &perCPU); err != nil {
			return nil, fmt.Errorf("read %s[%s]: %w", bpfmaps.CountersMap, r, err)
		}
		var sum bpfmaps.Counter
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
		bpfmaps.EndpointsMap: d.endpoints,
		bpfmaps.PolicyMap:    d.policy,
		bpfmaps.IPCacheMap:   d.ipcache,
		bpfmaps.CIDRsMap:     d.cidrs,
		bpfmaps.ServicesMap:  d.services,
		bpfmaps.BackendsMap:  d.backends,
		bpfmaps.CTMap:        d.ct,
		bpfmaps.SvcCTMap:     d.svcCT,
	} {
		n, err := bpfmaps.Count(m)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", name, err)
		}
		out[name] = n
	}
	// The devices, not key 0 (host routing on).
	uplinks, err := d.Uplinks()
	if err != nil {
		return nil, err
	}
	out[bpfmaps.UplinksMap] = len(uplinks)
	return out, nil
}

// Generation returns lockstep_state.gen as last written by Apply.
func (d *Datapath) Generation() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mirror.gen
}

// Events opens a reader of verdict events (see bpfmaps.OpenEvents).
func (d *Datapath) Events() (*bpfmaps.EventReader, error) {
	return bpfmaps.OpenEvents(d.pinRoot)
}
