//go:build linux

package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/bpfmaps"
)

// Conntrack entries of endpoints that left (lockstep_ct, and the
// translated connections of lockstep_svc_ct). A tracked packet passes before
// its endpoint is looked up, so the entries of a removed endpoint would let
// the connections it had keep flowing for as long as its veth exists and
// the entries have not expired (up to 2 h for TCP). When an Apply removes
// endpoints, their ifindexes wait in Datapath.ctGone; the settler deletes
// their entries after the next grace period, off the apply path, once no
// packet that saw the endpoint can still be creating one.
//
// The programs keep copies of live entries in a per-CPU flow cache
// (bpf/lib/ct.h). After deleting, the flush bumps lockstep_ct_epoch, which
// drops every copy made before; should the bump fail, a copy still lives
// for at most the cache's 1 s lifetime.
//
// An ifindex attached again before that (Linux hands out ifindexes
// cyclically, so only after the counter wraps) leaves the set and keeps
// its entries. Close does a flush still queued; only a killed agent loses
// one, and those entries expire on their own.

// ctBatch is how many conntrack entries one batch lookup reads (hash map
// batches need Linux 5.6, within the floor in doc.go). A batch must hold
// a whole bucket; buckets are short.
const ctBatch = 4096

// forgetEndpointsCT queues the conntrack entries of the removed endpoints
// for deletion. Called with d.mu held.
func (d *Datapath) forgetEndpointsCT(es []*epEntry) {
	if len(es) == 0 {
		return
	}
	if d.ctGone == nil {
		d.ctGone = make(map[uint32]struct{}, len(es))
	}
	for _, e := range es {
		d.ctGone[e.ifindex] = struct{}{}
	}
}

// takeCTGone returns the queued ifindexes and empties the queue. Called
// with d.mu held.
func (d *Datapath) takeCTGone() map[uint32]struct{} {
	gone := d.ctGone
	d.ctGone = nil
	return gone
}

// flushConntrack deletes every conntrack entry of the ifindexes in gone,
// in lockstep_ct and lockstep_svc_ct, and their share slots
// (ctshare.go), and returns how many entries it deleted.
// Called without d.mu: it reads the whole tables.
func (d *Datapath) flushConntrack(gone map[uint32]struct{}) (int, error) {
	d.ctMu.Lock()
	defer d.ctMu.Unlock()
	n, err := flushTable[bpfmaps.CTEntry](d.ct, bpfmaps.CTMap, gone)
	err = errors.Join(err, d.countCTDeleted(bpfmaps.CTTableCT, n))
	ns, serr := flushTable[bpfmaps.SvcCTEntry](d.svcCT, bpfmaps.SvcCTMap, gone)
	serr = errors.Join(serr, d.countCTDeleted(bpfmaps.CTTableSvc, ns), d.forgetShares(gone))
	if n+ns > 0 {
		// Also after a partial delete: what went must not live on in
		// a cache.
		if err := d.bumpCTEpoch(); err != nil {
			return 0, err
		}
	}
	if err := errors.Join(err, serr); err != nil {
		return 0, err
	}
	return n + ns, nil
}

// flushTable deletes the entries of table (keyed by ct_key, with values
// V) whose ifindex is in gone, and returns how many it deleted (those it
// found, less those evicted meanwhile), also when it fails.
func flushTable[V any](table *ebpf.Map, name string, gone map[uint32]struct{}) (int, error) {
	var doomed []bpfmaps.CTKey
	err := scanCT(table, name, func(k bpfmaps.CTKey, _ V) {
		if _, ok := gone[k.Ifindex]; ok {
			doomed = append(doomed, k)
		}
	})
	if err != nil {
		return 0, err
	}
	n, err := deleteCounting(table, doomed)
	if err != nil {
		return n, fmt.Errorf("delete entries of removed endpoints from %s: %w", name, err)
	}
	return n, nil
}

// scanCT calls fn for every entry of table (keyed by ct_key, with values
// V), read in batches.
func scanCT[V any](table *ebpf.Map, name string, fn func(bpfmaps.CTKey, V)) error {
	keys := make([]bpfmaps.CTKey, ctBatch)
	vals := make([]V, ctBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := table.BatchLookup(&cursor, keys, vals, nil)
		for i, k := range keys[:n] {
			fn(k, vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil // the end of the table
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// bumpCTEpoch changes lockstep_ct_epoch, so that the programs stop using
// every flow cache copy made before (bpf/lib/ct.h). Call it after deleting
// conntrack entries. Its callers never run concurrently (the settler, and
// Close once the settler stopped), so a read and a write are enough.
func (d *Datapath) bumpCTEpoch() error {
	var epoch uint32
	if err := d.ctEpoch.Lookup(uint32(0), &epoch); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.CTEpochMap, err)
	}
	if err := d.ctEpoch.Update(uint32(0), epoch+1, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("bump %s: %w", bpfmaps.CTEpochMap, err)
	}
	return nil
}
