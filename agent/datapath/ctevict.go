//go:build linux

package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/bpfmaps"
)

// Evictions of the conntrack tables. lockstep_ct and lockstep_svc_ct are
// LRUs: when one is full, the kernel drops its least recently used
// entries to make room for a new one, silently, and the connections they
// held are judged by policy again on their next packet (a translated one
// may be sent to another backend). The shares (ctshare.go) bound what one
// pod takes; an operator still needs to see that a node's tables are too
// small. The kernel counts no evictions, so they are derived from three
// counts, each with one writer:
//
//   - inserted: the programs count, per CPU, every write that adds a key
//     (ct_put in bpf/lib/ct.h: BPF_NOEXIST, a key already there is
//     replaced without counting) in lockstep_ct_inserted;
//   - deleted: the agent counts every entry it deletes (the reclaimer's
//     expired entries, the flush of removed endpoints) in
//     lockstep_ct_evictions, the agent its only writer;
//   - left: the reclaimer counts the entries of each table as it walks it.
//
// An entry leaves a table by a delete or an eviction only, so evicted =
// inserted - deleted - left. Every reclaim (ctReclaimInterval) derives it
// and keeps the largest value yet in lockstep_ct_evictions, so the count
// survives agent restarts and never goes down.
//
// The walk is not atomic. Inserted is read before it; an entry evicted
// during the walk before it is reached is missed by left, an entry added
// during it is seen by left but not in inserted. So a derived value is
// never above the evictions made by the end of the walk, and below them
// by at most the new connections made during it: the next reclaim
// catches up. Deletes do not race, the agent serialises them (ctMu).
//
// Entries no insert counted (those made before the programs counted, by
// an older agent's programs) would make the count wrong by as many
// forever: when the entries left exceed what inserted (read again after
// the walk) less deleted allows, the excess is recorded as untracked and
// added to inserted from then on. Maps are replaced together: when a
// table's pin is incompatible and replaced, so are the counts (Load).
//
// Evictions include entries that had expired and that the reclaimer had
// not yet deleted (at most those of its last 10 s): an LRU drops the
// least recently used first, and those are. So a growing count means the
// table was full of live and recently expired entries: it is too small
// for the node's rate of new connections times their lifetime.

// ctTables are the conntrack tables whose evictions are counted, in
// bpfmaps.CTTable* order.
func (d *Datapath) ctTables() [bpfmaps.CTTables]*ebpf.Map {
	return [bpfmaps.CTTables]*ebpf.Map{bpfmaps.CTTableCT: d.ct, bpfmaps.CTTableSvc: d.svcCT}
}

// ConntrackEvictions returns, by the name of each conntrack table
// (lockstep_ct, lockstep_svc_ct), how many entries its LRU evicted to
// make room for new ones, as of the reclaimer's last run (see above).
func (d *Datapath) ConntrackEvictions() (map[string]uint64, error) {
	out := make(map[string]uint64, bpfmaps.CTTables)
	for table, name := range bpfmaps.CTTableMaps {
		acc, err := d.ctAccount(uint32(table))
		if err != nil {
			return nil, err
		}
		out[name] = acc.Evicted
	}
	return out, nil
}

// ConntrackReclaimRaces returns how many expired conntrack entries the
// reclaimer took out, since Load, that a new connection had made live
// again after the reclaimer read them. It put them back (see takeExpired
// in ctshare.go); a count that grows fast would mean tuples are reused
// as soon as they expire, and each race judges a packet by policy again.
func (d *Datapath) ConntrackReclaimRaces() uint64 { return d.ctRaced.Load() }

// ctAccount reads the eviction account of table.
func (d *Datapath) ctAccount(table uint32) (bpfmaps.CTEvictions, error) {
	var acc bpfmaps.CTEvictions
	if err := d.ctEvictions.Lookup(table, &acc); err != nil {
		return acc, fmt.Errorf("read %s: %w", bpfmaps.CTEvictionsMap, err)
	}
	return acc, nil
}

// ctInserted reads how many entries the programs added to table, summed
// over the CPUs.
func (d *Datapath) ctInserted(table uint32) (uint64, error) {
	var perCPU []uint64
	if err := d.ctInserts.Lookup(table, &perCPU); err != nil {
		return 0, fmt.Errorf("read %s: %w", bpfmaps.CTInsertedMap, err)
	}
	var sum uint64
	for _, n := range perCPU {
		sum += n
	}
	return sum, nil
}

// countCTDeleted adds n to the entries the agent deleted from table.
// Called with d.ctMu held, after the deletes: an agent killed in between
// counts those n as evictions.
func (d *Datapath) countCTDeleted(table uint32, n int) error {
	if n == 0 {
		return nil
	}
	acc, err := d.ctAccount(table)
	if err != nil {
		return err
	}
	acc.Deleted += uint64(n)
	if err := d.ctEvictions.Put(table, acc); err != nil {
		return fmt.Errorf("write %s: %w", bpfmaps.CTEvictionsMap, err)
	}
	return nil
}

// ctWalk is what the reclaimer saw of one conntrack table: the entries
// the programs had inserted before its walk (before) and after it
// (after), the entries it left in the table, and the expired entries it
// took out that a packet had made live again (raced; see takeExpired).
type ctWalk struct {
	before, after, left, raced uint64
}

// countEvictions returns acc brought up to date with walk (see above):
// the entries left beyond what the counts allow become untracked, and
// the evictions are what the counts do not explain, never fewer than
// before.
func countEvictions(acc bpfmaps.CTEvictions, walk ctWalk) bpfmaps.CTEvictions {
	if gone := acc.Deleted + walk.left; walk.after+acc.Untracked < gone {
		acc.Untracked = gone - walk.after
	}
	if in, gone := walk.before+acc.Untracked, acc.Deleted+walk.left; in > gone {
		acc.Evicted = max(acc.Evicted, in-gone)
	}
	return acc
}

// recordWalk brings table's eviction account up to date with walk.
// Called with d.ctMu held, after the walk's deletes were counted.
func (d *Datapath) recordWalk(table uint32, walk ctWalk) error {
	acc, err := d.ctAccount(table)
	if err != nil {
		return err
	}
	next := countEvictions(acc, walk)
	if next == acc {
		return nil
	}
	if err := d.ctEvictions.Put(table, next); err != nil {
		return fmt.Errorf("write %s: %w", bpfmaps.CTEvictionsMap, err)
	}
	return nil
}
