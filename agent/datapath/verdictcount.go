//go:build linux

package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// The per-policy verdict counts. The programs count what policy decides
// whether or not verdict events are emitted, in two maps that cost the
// established fast path nothing: lockstep_rule_allowed counts, by rule
// id, the new connections each rule allowed (where the program decides
// "allowed-new" by a rule), and lockstep_denied, by endpoint and
// direction, the packets an isolated direction dropped because no rule
// allowed them. Neither knows policies: the agent does.
//
// A rule id names one rule of one policy (ruleTable) while any map holds
// it, so a policy's allowed count is the sum of its rules' ids, plus the
// counts of the ids it held before they were reclaimed: the agent adds an
// id's count to its policy's running total (retire) before it zeroes the
// slot for the next rule. A default-deny drop is every isolating
// policy's drop: a policy's denied count is the sum of the drops of the
// endpoint directions it isolates. That set changes with the policy, its
// pods and the other policies, so the agent attributes a slot's drops as
// it reads them (folds them) to the policies isolating the endpoint at
// the time, and keeps the sums: it folds at every read, before an Apply
// changes who isolates an endpoint, and before it removes one. Neither
// sum goes down while the policy isolates a local endpoint; the sums of a
// policy that no longer does are dropped at the next read (a counter
// reset, should it come back), so that they do not pile up with every
// policy name the node ever saw.

// verdictTotals keeps the default-deny drops attributed to policies, and
// the allowed counts of reclaimed rule ids.
type verdictTotals struct {
	mu sync.Mutex
	// last is each lockstep_denied slot's count as last folded.
	last map[uint32]uint64
	// denied is the drops folded so far, by policy and direction.
	denied map[policyDir]uint64
	// retired is the allowed counts of the rule ids reclaimed so far, by
	// policy and direction.
	retired map[policyDir]uint64
}

// retire adds the count of a reclaimed rule id, n, to its policy's.
func (v *verdictTotals) retire(o policy.RuleOrigin, n uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.retired == nil {
		v.retired = make(map[policyDir]uint64)
	}
	v.retired[policyDir{o.Namespace + "/" + o.Name, o.Dir}] += n
}

// prune drops the sums of the policies not in present.
func (v *verdictTotals) prune(present map[policyDir]struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, m := range []map[policyDir]uint64{v.denied, v.retired} {
		for pd := range m {
			if _, ok := present[pd]; !ok {
				delete(m, pd)
			}
		}
	}
}

// policyDir is a policy (namespace/name) and a direction.
type policyDir struct {
	policy string
	dir    policyapi.Direction
}

// fold attributes what the slots of the endpoint of ifindex counted
// since they were last folded to the policies iso names, by direction;
// remove then deletes the slots, whose next count starts anew.
func (v *verdictTotals) fold(m *ebpf.Map, ifindex uint32, iso [2][]string, remove bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var errs []error
	for dir := range iso {
		key := bpfmaps.DeniedKey(ifindex, uint8(dir))
		var perCPU []uint64
		err := m.Lookup(key, &perCPU)
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
		case err != nil:
			errs = append(errs, fmt.Errorf("read %s of ifindex %d: %w", bpfmaps.DeniedMap, ifindex, err))
		default:
			v.add(key, sum(perCPU), iso[dir], policyapi.Direction(dir))
		}
		if !remove {
			continue
		}
		delete(v.last, key)
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete %s of ifindex %d: %w", bpfmaps.DeniedMap, ifindex, err))
		}
	}
	return errors.Join(errs...)
}

// add attributes the drops slot key counted since the last fold, n in
// all now, to policies. Called with v.mu held.
func (v *verdictTotals) add(key uint32, n uint64, policies []string, dir policyapi.Direction) {
	if v.last == nil {
		v.last = make(map[uint32]uint64)
		v.denied = make(map[policyDir]uint64)
	}
	delta := n - v.last[key]
	if n < v.last[key] {
		delta = n // the slot was made anew
	}
	v.last[key] = n
	for _, p := range policies {
		v.denied[policyDir{p, dir}] += delta
	}
}

func sum(perCPU []uint64) uint64 {
	var n uint64
	for _, c := range perCPU {
		n += c
	}
	return n
}

// foldDenied folds the default-deny drops of e into the policies that
// isolated it in parity par; remove also deletes its slots (it is gone,
// or its ifindex changes hands). Called with d.mu held. A failure is
// logged: counts are reports, never a reason to fail an Apply.
func (d *Datapath) foldDenied(e *epEntry, par int, remove bool) {
	if d.denied == nil {
		return
	}
	var iso [2][]string
	if src := e.src[par]; src != nil {
		iso = src.Isolators
	}
	if err := d.verdicts.fold(d.denied, e.ifindex, iso, remove); err != nil {
		d.log.Warn("fold default-deny counts", "endpoint", e.name, "err", err)
	}
}

// PolicyVerdicts returns the verdict counts of every policy that isolates
// a local endpoint in the state applied last, per direction it does, in
// the order namespace, name, direction. A policy that is deleted, or that
// no longer selects a pod of this node, has none, and its sums are
// dropped: should it select one again, its series may restart from a
// lower value (a counter reset to Prometheus). A map that
// cannot be read leaves out what it holds (logged, and returned as the
// error): the counts are those of the rest.
func (d *Datapath) PolicyVerdicts() ([]PolicyVerdict, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Under d.mu: an Apply neither changes who isolates an endpoint nor
	// reclaims a rule id while the slots are folded and read.
	live := int(d.mirror.gen & 1)
	iso := make(map[uint32][2][]string, len(d.mirror.eps))
	for idx, e := range d.mirror.eps {
		if src := e.src[live]; src != nil {
			iso[idx] = src.Isolators
		}
	}

	slots, deniedErr := readDenied(d.denied)
	d.verdicts.foldRead(slots, iso)

	allowed := make(map[policyDir]uint64)
	ids, origins := d.rules.named()
	counts, allowedErr := d.ruleAllowedCounts(ids)
	for i, id := range ids {
		if n, ok := counts[id]; ok {
			o := origins[i]
			allowed[policyDir{o.Namespace + "/" + o.Name, o.Dir}] += n
		}
	}

	present := make(map[policyDir]struct{})
	for _, is := range iso {
		for dir, names := range is {
			for _, n := range names {
				present[policyDir{n, policyapi.Direction(dir)}] = struct{}{}
			}
		}
	}
	d.verdicts.prune(present)
	d.verdicts.mu.Lock()
	out := make([]PolicyVerdict, 0, len(present))
	for pd := range present {
		ns, name, _ := strings.Cut(pd.policy, "/")
		out = append(out, PolicyVerdict{Namespace: ns, Name: name, Dir: pd.dir,
			Allowed: allowed[pd] + d.verdicts.retired[pd], Denied: d.verdicts.denied[pd]})
	}
	d.verdicts.mu.Unlock()
	slices.SortFunc(out, func(a, b PolicyVerdict) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Dir, b.Dir))
	})
	err := errors.Join(deniedErr, allowedErr)
	if err != nil {
		d.log.Warn("read per-policy verdict counts; the counts of the rest are reported", "err", err)
	}
	return out, err
}

// ruleAllowedBatch is how many lockstep_rule_allowed ids one batch read
// asks for at most.
const ruleAllowedBatch = 1024

// ruleAllowedCounts returns the new connections each rule id of ids
// allowed, summed over CPUs. It reads lockstep_rule_allowed up to the
// highest id in batches, not one lookup per id: a scrape holds d.mu, and
// a node's thousands of named rules cost as many syscalls otherwise. When
// a batch read fails, or returns less than the ids, it falls back to one
// lookup per id (logged once, counted in verdictBatchFallbacks), whose
// failures leave out only the ids that failed (the error says which).
// Called with d.mu held.
func (d *Datapath) ruleAllowedCounts(ids []uint32) (map[uint32]uint64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	counts, err := d.ruleAllowedBatched(ids)
	if err == nil {
		return counts, nil
	}
	d.verdictBatchFallbacks++
	if d.verdictBatchFallbacks == 1 {
		d.log.Warn("read per-policy verdict counts in batches; reading them one id at a time", "err", err)
	}
	return d.ruleAllowedOneByOne(ids)
}

// ruleAllowedBatched is ruleAllowedCounts in batches; any problem is an
// error.
func (d *Datapath) ruleAllowedBatched(ids []uint32) (map[uint32]uint64, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	highest := slices.Max(ids)
	batch := min(ruleAllowedBatch, int(highest)+1)
	all := make([]uint64, highest+1)
	seen := make([]bool, highest+1)
	keys := make([]uint32, batch)
	vals := make([]uint64, batch*cpus)
	var cursor ebpf.MapBatchCursor
	// An array's batches move forward from the last key they returned:
	// a read past bpfmaps.MaxRuleIDs means the cursor did not.
	for range bpfmaps.MaxRuleIDs/batch + 2 {
		n, err := d.ruleAllowed.BatchLookup(&cursor, keys, vals, nil)
		for i, k := range keys[:n] {
			if k <= highest {
				all[k], seen[k] = sum(vals[i*cpus:(i+1)*cpus]), true
			}
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist), err == nil && n > 0 && keys[n-1] >= highest:
			// The end of the array, or past the highest id.
			out := make(map[uint32]uint64, len(ids))
			for _, id := range ids {
				if !seen[id] {
					return nil, fmt.Errorf("read %s: id %d missing from the batches", bpfmaps.RuleAllowedMap, id)
				}
				out[id] = all[id]
			}
			return out, nil
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", bpfmaps.RuleAllowedMap, err)
		case n == 0:
			return nil, fmt.Errorf("read %s: a batch returned nothing before the end", bpfmaps.RuleAllowedMap)
		}
	}
	return nil, fmt.Errorf("read %s: the batches did not reach id %d", bpfmaps.RuleAllowedMap, highest)
}

// ruleAllowedOneByOne is ruleAllowedCounts one lookup per id.
func (d *Datapath) ruleAllowedOneByOne(ids []uint32) (map[uint32]uint64, error) {
	out := make(map[uint32]uint64, len(ids))
	var errs []error
	var perCPU []uint64
	for _, id := range ids {
		if err := d.ruleAllowed.Lookup(id, &perCPU); err != nil {
			errs = append(errs, fmt.Errorf("read %s[%d]: %w", bpfmaps.RuleAllowedMap, id, err))
			continue
		}
		out[id] = sum(perCPU)
	}
	return out, errors.Join(errs...)
}

// sameIsolators reports whether a and b are isolated by the same policies.
func sameIsolators(a, b *policy.EndpointPolicy) bool {
	return slices.Equal(a.Isolators[0], b.Isolators[0]) && slices.Equal(a.Isolators[1], b.Isolators[1])
}

// deniedBatch is how many lockstep_denied slots one batch read asks for.
const deniedBatch = 256

// readDenied returns the count of every lockstep_denied slot, summed over
// CPUs, read in batches rather than two syscalls per slot.
func readDenied(m *ebpf.Map) (map[uint32]uint64, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", bpfmaps.DeniedMap, err)
	}
	out := make(map[uint32]uint64)
	keys := make([]uint32, deniedBatch)
	vals := make([]uint64, deniedBatch*cpus)
	var cursor ebpf.MapBatchCursor
	// A hash table's batches move forward bucket by bucket: more reads
	// than its slots mean the cursor did not.
	for range bpfmaps.CTShareSlots/deniedBatch + 2 {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i, k := range keys[:n] {
			out[k] = sum(vals[i*cpus : (i+1)*cpus])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil // the end of the table
		}
		if err != nil {
			return out, fmt.Errorf("read %s: %w", bpfmaps.DeniedMap, err)
		}
		if n == 0 {
			return out, fmt.Errorf("read %s: a batch read returned nothing before the end of the table", bpfmaps.DeniedMap)
		}
	}
	return out, fmt.Errorf("read %s: the batches did not reach the end of the table", bpfmaps.DeniedMap)
}

// foldRead is fold, for every endpoint iso names, of the slot counts
// readDenied returned: a slot missing from counts has counted nothing.
func (v *verdictTotals) foldRead(counts map[uint32]uint64, iso map[uint32][2][]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for key, n := range counts {
		if is, ok := iso[key>>1]; ok {
			dir := key & 1
			v.add(key, n, is[dir], policyapi.Direction(dir))
		}
	}
}
