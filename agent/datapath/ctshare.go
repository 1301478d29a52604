//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/bpfmaps"
)

// Each endpoint's shares of conntrack (bpf/lib/ct.h, ct_admit). The
// tables are LRUs of the node: without shares, one pod's burst of short
// flows evicts the idle established connections of every other pod. So an
// endpoint may hold at most bpfmaps.CTShareLimit entries in lockstep_ct
// and lockstep_svc_ct together for the connections it opens, and as many
// for those opened towards it; a new connection beyond its direction's
// share is dropped (reason conntrack-share) and counted as the endpoint's
// refusal. Separate shares keep others from spending what a pod needs to
// open its own connections: a flood towards a pod fills only the share of
// connections towards it. Four endpoints at both shares fill lockstep_ct,
// which then evicts: the shares bound what one pod takes from the node,
// they do not make eviction impossible.
//
// The shares bite only while the node is under pressure: while its
// estimate of the entries held in both tables together is above
// bpfmaps.CTPressure, half of one table. An entry stays counted until it
// expires and the next reclaim releases it, so a share enforced on an
// empty table would cap a pod at some hundred new connections a second
// (16384 over a FIN-closed connection's 130 s) for nothing. The node's
// estimate is counted like an endpoint's, at bpfmaps.CTNodeKey: the
// programs add every entry they admit, the reclaimer releases what went.
// So it is never below the truth between two reclaims either, and a pod
// cannot fill the tables in the 10 s between them; once it is above the
// threshold, an endpoint beyond its share creates nothing more, which
// leaves the other half of each table to the endpoints within theirs.
//
// The shares hold only while the reclaimer runs: it writes the time of
// each run at bpfmaps.CTReclaimKey, and the programs refuse nothing once
// that is 30 s old (an agent that is down releases nothing, and pods must
// not lose new connections to its absence).
//
// The programs cannot tell when an entry goes: an LRU evicts silently and
// an expired entry stays until it is replaced. They count the entries
// they create (lockstep_ct_share, atomic adds, the programs its only
// writer); the reclaimer counts the ones that went (lockstep_ct_released,
// the agent its only writer). Every ctReclaimInterval it reads the
// created counts, then walks both tables, deletes the entries that
// expired, counts those left per endpoint and in all, and writes released
// = created (as read before the walk) less left, for every endpoint and
// for the node. What the agent deleted and what the LRUs evicted are
// released alike: neither is left. An entry created during the walk
// may be counted as left and again as created since: the estimate,
// created less released, is never below the entries an endpoint (or the
// node) holds, and the next round corrects it. The only way past a share
// or the threshold is a race of CPUs that each read one below it (see
// ct_admit).

// ctReclaimInterval is how often the reclaimer runs: an endpoint at its
// share gets back what expired within that time.
const ctReclaimInterval = 10 * time.Second

// ctExpiredSlack is how long past its deadline an entry must be for the
// reclaimer to delete it: the programs read a tick-resolution clock.
const ctExpiredSlack = uint64(time.Second)

// ConntrackShares returns the conntrack share use of every endpoint with
// a slot, both directions together, by host interface name ("ifindex N"
// for one no longer attached).
func (d *Datapath) ConntrackShares() (map[string]ConntrackShare, error) {
	created, err := readShares(d.ctShare)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	names := make(map[uint32]string, len(d.attached))
	for name, idx := range d.attached {
		names[uint32(idx)] = name
	}
	d.mu.Unlock()
	out := make(map[string]ConntrackShare, len(created))
	for key, s := range created {
		if key == bpfmaps.CTNodeKey {
			continue
		}
		var released uint64
		if err := d.ctReleased.Lookup(key, &released); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("read %s: %w", bpfmaps.CTReleasedMap, err)
		}
		idx := key >> 1
		name, ok := names[idx]
		if !ok {
			name = fmt.Sprintf("ifindex %d", idx)
		}
		sum := out[name]
		sum.Entries += s.Created - min(released, s.Created)
		sum.Refused += s.Refused
		out[name] = sum
	}
	return out, nil
}

// ConntrackHeld returns the programs' estimate of the entries the node
// holds in lockstep_ct and lockstep_svc_ct together (never below the
// truth, and brought down to it every reclaim): the endpoints' shares are
// enforced while it is above bpfmaps.CTPressure.
func (d *Datapath) ConntrackHeld() (uint64, error) {
	var node bpfmaps.CTShare
	var released uint64
	if err := d.ctShare.Lookup(bpfmaps.CTNodeKey, &node); errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("read %s: %w", bpfmaps.CTShareMap, err)
	}
	if err := d.ctReleased.Lookup(bpfmaps.CTNodeKey, &released); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, fmt.Errorf("read %s: %w", bpfmaps.CTReleasedMap, err)
	}
	return node.Created - min(released, node.Created), nil
}

// readShares reads lockstep_ct_share whole.
func readShares(m *ebpf.Map) (map[uint32]bpfmaps.CTShare, error) {
	out := make(map[uint32]bpfmaps.CTShare)
	var k uint32
	var v bpfmaps.CTShare
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", bpfmaps.CTShareMap, err)
	}
	return out, nil
}

// startReclaimer starts the goroutine that runs reclaimConntrack every
// ctReclaimInterval until stopReclaimer.
func (d *Datapath) startReclaimer() {
	stop, done := make(chan struct{}), make(chan struct{})
	d.reclaimStop, d.reclaimDone = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(ctReclaimInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if n, err := d.reclaimConntrack(); err != nil {
				d.log.Warn("reclaim expired conntrack entries; endpoints may meet their share early", "err", err, "deleted", n)
			}
		}
	}()
}

// stopReclaimer ends the reclaimer and waits for it.
func (d *Datapath) stopReclaimer() {
	if d.reclaimStop == nil {
		return
	}
	close(d.reclaimStop)
	<-d.reclaimDone
	d.reclaimStop = nil
}

// reclaimConntrack deletes the expired conntrack entries and brings every
// endpoint's released count up to date (see above). It returns how many
// entries it deleted.
func (d *Datapath) reclaimConntrack() (int, error) {
	d.ctMu.Lock()
	defer d.ctMu.Unlock()
	created, err := readShares(d.ctShare)
	if err != nil {
		return 0, err
	}
	now, err := coarseMonotonic()
	if err != nil {
		return 0, err
	}
	left := make(map[uint32]uint64, len(created))
	n, err := d.reclaimCounted(bpfmaps.CTTableCT, now, left, func(table *ebpf.Map, walk *ctWalk) (int, error) {
		return reclaimTable(table, bpfmaps.CTMap, now, left, walk, func(v bpfmaps.CTEntry) (uint64, uint8) {
			return v.Expires, bpfmaps.CTEntryDir(v.Flags)
		})
	})
	// Translated connections are charged to the client's egress share.
	ns, serr := d.reclaimCounted(bpfmaps.CTTableSvc, now, left, func(table *ebpf.Map, walk *ctWalk) (int, error) {
		return reclaimTable(table, bpfmaps.SvcCTMap, now, left, walk, func(v bpfmaps.SvcCTEntry) (uint64, uint8) {
			return v.Expires, 1
		})
	})
	if err := errors.Join(err, serr); err != nil {
		return n + ns, err
	}
	for key, s := range created {
		released := s.Created - min(left[key], s.Created)
		if err := d.ctReleased.Put(key, released); err != nil {
			return n + ns, fmt.Errorf("write %s: %w", bpfmaps.CTReleasedMap, err)
		}
	}
	if err := d.ctReleased.Put(bpfmaps.CTReclaimKey, now); err != nil {
		return n + ns, fmt.Errorf("write %s: %w", bpfmaps.CTReleasedMap, err)
	}
	// Released counts of endpoints whose slot went with a flush.
	var stale []uint32
	var k uint32
	var v uint64
	it := d.ctReleased.Iterate()
	for it.Next(&k, &v) {
		if _, ok := created[k]; !ok && k != bpfmaps.CTReclaimKey {
			stale = append(stale, k)
		}
	}
	if err := errors.Join(it.Err(), deleteAll(d.ctReleased, stale)); err != nil {
		return n + ns, fmt.Errorf("clean %s: %w", bpfmaps.CTReleasedMap, err)
	}
	return n + ns, nil
}

// reclaimCounted runs reclaim, the reclaim of the conntrack table of key
// table (bpfmaps.CTTable*), and counts its deletes and the table's
// evictions (ctevict.go). It returns how many entries reclaim deleted.
func (d *Datapath) reclaimCounted(table uint32, now uint64, left map[uint32]uint64, reclaim func(*ebpf.Map, *ctWalk) (int, error)) (int, error) {
	var walk ctWalk
	var err error
	if walk.before, err = d.ctInserted(table); err != nil {
		return 0, err
	}
	n, err := reclaim(d.ctTables()[table], &walk)
	d.ctRaced.Add(walk.raced)
	if cerr := d.countCTDeleted(table, n); err != nil || cerr != nil {
		return n, errors.Join(err, cerr)
	}
	if walk.after, err = d.ctInserted(table); err != nil {
		return n, err
	}
	return n, d.recordWalk(table, walk)
}

// reclaimTable deletes the entries of table (keyed by ct_key, with values
// V whose deadline and share direction of reads) that expired before now,
// counts those left per share key into left and in all into walk.left,
// and returns how many it deleted. See takeExpired for an entry a new
// connection made live again since the walk read it.
func reclaimTable[V any](table *ebpf.Map, name string, now uint64, left map[uint32]uint64, walk *ctWalk, of func(V) (expires uint64, dir uint8)) (int, error) {
	var doomed []bpfmaps.CTKey
	err := scanCT(table, name, func(k bpfmaps.CTKey, v V) {
		expires, dir := of(v)
		if expires+ctExpiredSlack < now {
			doomed = append(doomed, k)
			return
		}
		keep(left, walk, k, dir)
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, k := range doomed {
		fate, v, err := takeExpired(table, k, now, walk, of)
		if fate == ctDeleted || fate == ctRemade {
			deleted++
		}
		if err != nil {
			return deleted, fmt.Errorf("delete expired entries of %s: %w", name, err)
		}
		if fate == ctKept || fate == ctRemade {
			_, dir := of(v)
			keep(left, walk, k, dir)
		}
	}
	return deleted, nil
}

// keep counts an entry of key k and share direction dir that the walk
// left in its table: for its endpoint and for the node, in left, and in
// walk.left.
func keep(left map[uint32]uint64, walk *ctWalk, k bpfmaps.CTKey, dir uint8) {
	left[bpfmaps.CTShareKey(k.Ifindex, dir)]++
	left[bpfmaps.CTNodeKey]++
	walk.left++
}

// ctFate is what takeExpired did with an entry.
type ctFate int

const (
	ctAbsent  ctFate = iota // gone already: evicted since the walk
	ctDeleted               // deleted: it was still expired
	ctKept                  // left: a new connection made it live again
	ctRemade                // deleted, and made again by a new connection
)

// takeExpired deletes the entry of k from table if it is still expired.
// When it keeps the entry, v is its value. A packet may make the entry
// live again at any time: a new connection over the tuple replaces it
// (ct_create; an expired entry is never refreshed). So the entry is taken
// out and checked in one step (BPF_MAP_LOOKUP_AND_DELETE_ELEM, Linux
// 5.14); one taken live is put back, unless a packet has made it again
// meanwhile, and counted in walk.raced. Its connection loses nothing but
// that moment, in which a packet finds no entry and is judged by policy
// again, as after an eviction. Before 5.14 the entry is read, then
// deleted: one made live between the two syscalls is deleted, and its
// connection judged again on its next packet.
func takeExpired[V any](table *ebpf.Map, k bpfmaps.CTKey, now uint64, walk *ctWalk, of func(V) (uint64, uint8)) (fate ctFate, v V, err error) {
	expired := func(v V) bool {
		expires, _ := of(v)
		return expires+ctExpiredSlack < now
	}
	err = table.LookupAndDelete(k, &v)
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return ctAbsent, v, nil
	case errors.Is(err, ebpf.ErrNotSupported):
		if err := table.Lookup(k, &v); err != nil {
			return ctAbsent, v, nil
		}
		if !expired(v) {
			return ctKept, v, nil
		}
		if err := table.Delete(k); errors.Is(err, ebpf.ErrKeyNotExist) {
			return ctAbsent, v, nil
		} else if err != nil {
			return ctKept, v, err
		}
		return ctDeleted, v, nil
	case err != nil:
		return ctKept, v, err
	}
	if expired(v) {
		return ctDeleted, v, nil
	}
	walk.raced++
	err = table.Update(k, v, ebpf.UpdateNoExist)
	switch {
	case errors.Is(err, ebpf.ErrKeyExist):
		return ctRemade, v, nil
	case err != nil:
		return ctDeleted, v, fmt.Errorf("put back an entry made live again: %w", err)
	}
	return ctKept, v, nil
}

// forgetShares deletes the share slots of the ifindexes in gone.
func (d *Datapath) forgetShares(gone map[uint32]struct{}) error {
	keys := make([]uint32, 0, 2*len(gone))
	for idx := range gone {
		keys = append(keys, bpfmaps.CTShareKey(idx, 0), bpfmaps.CTShareKey(idx, 1))
	}
	if err := deleteAll(d.ctShare, keys); err != nil {
		return fmt.Errorf("delete %s slots of removed endpoints: %w", bpfmaps.CTShareMap, err)
	}
	if err := deleteAll(d.ctReleased, keys); err != nil {
		return fmt.Errorf("delete %s slots of removed endpoints: %w", bpfmaps.CTReleasedMap, err)
	}
	return nil
}

// coarseMonotonic reads the programs' conntrack clock (ct_now:
// bpf_ktime_get_coarse_ns, CLOCK_MONOTONIC at tick resolution).
func coarseMonotonic() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("read CLOCK_MONOTONIC_COARSE: %w", err)
	}
	return uint64(ts.Nano()), nil
}
