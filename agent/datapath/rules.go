//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
)

// ruleTable names the rule ids the datapath writes into policy map values
// (bpfmaps.PolicyValue.Rule), which the programs copy into the verdict
// events of the connections they allow: the kernel reports a number, the
// agent turns it back into the policy rule (policy.RuleOrigin) it wrote it
// for. Ids start at 1 (0 is "no rule"). The ids index
// lockstep_rule_allowed (bpfmaps.RuleAllowedMap), which bounds them to
// bpfmaps.MaxRuleIDs-1.
//
// The ids are shared by every tenant of the node, so running out must
// never stop an Apply: one namespace's churn would freeze every other's
// policy. An id is reclaimed once no inner map of either parity holds it
// any more (reclaimRuleIDs, after the flip that removed its last use), and
// only when ids run short, so that an event read late names the rule that
// decided it for as long as possible. When even reclaiming leaves none,
// the rule is written with id 0: it is enforced all the same, but its
// events say "rule ids exhausted" and its connections count for no policy
// until a later Apply names it.
type ruleTable struct {
	mu    sync.Mutex
	ids   map[policy.RuleOrigin]uint32
	names []policy.RuleOrigin // names[id-1]; the zero origin for a free id
	free  []uint32            // reclaimed ids, handed out before new ones
	max   int                 // ids handed out at most; 0: bpfmaps.MaxRuleIDs-1 (tests lower it)
	// unnamed counts the rules that went without an id (written with id
	// 0) because none was left, since Load, each once until ids are freed
	// again (lockstep_datapath_rule_ids_exhausted_total); without holds
	// those rules.
	unnamed uint64
	without map[policy.RuleOrigin]struct{}
	// freed counts the rounds of release: an inner map written with id 0
	// is rewritten only once ids were freed after it was written
	// (innerMap.freedAt), not at every Apply.
	freed uint64
}

// id returns the id of o, allocating one the first time: a reclaimed one
// if any, else a new one. It returns 0, and counts it, when none is left.
func (t *ruleTable) id(o policy.RuleOrigin) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[o]; ok {
		return id
	}
	var id uint32
	switch {
	case len(t.free) > 0:
		id = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.names[id-1] = o
	case len(t.names) < t.limit():
		t.names = append(t.names, o)
		id = uint32(len(t.names))
	default:
		if _, ok := t.without[o]; !ok {
			if t.without == nil {
				t.without = make(map[policy.RuleOrigin]struct{})
			}
			t.without[o] = struct{}{}
			t.unnamed++
		}
		return 0
	}
	delete(t.without, o)
	if t.ids == nil {
		t.ids = make(map[policy.RuleOrigin]uint32)
	}
	t.ids[o] = id
	return id
}

// limit is how many ids t hands out: max, or bpfmaps.MaxRuleIDs-1 when
// max is 0.
func (t *ruleTable) limit() int {
	if t.max > 0 {
		return t.max
	}
	return bpfmaps.MaxRuleIDs - 1
}

// short reports whether at most a quarter of the ids are left: time to
// reclaim those no map holds.
func (t *ruleTable) short() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.free)+t.limit()-len(t.names) <= t.limit()/4
}

// idOf returns the id of o, 0 when it is nil (no origin), and whether o
// got no id (ids exhausted).
func (t *ruleTable) idOf(o *policy.RuleOrigin) (uint32, bool) {
	if o == nil {
		return 0, false
	}
	id := t.id(*o)
	return id, id == 0
}

// held returns the ids of origins, those they have now; an origin
// without an id holds none.
func (t *ruleTable) held(origins []map[policy.RuleKey]*policy.RuleOrigin) map[uint32]struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[*policy.RuleOrigin]struct{})
	held := make(map[uint32]struct{})
	for _, os := range origins {
		for _, o := range os {
			if _, ok := seen[o]; ok {
				continue
			}
			seen[o] = struct{}{}
			if id, ok := t.ids[*o]; ok {
				held[id] = struct{}{}
			}
		}
	}
	return held
}

// named returns the ids in use and their origins, in id order.
func (t *ruleTable) named() ([]uint32, []policy.RuleOrigin) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint32, 0, len(t.names)-len(t.free))
	origins := make([]policy.RuleOrigin, 0, len(t.names)-len(t.free))
	for i, o := range t.names {
		if o != (policy.RuleOrigin{}) {
			ids, origins = append(ids, uint32(i+1)), append(origins, o)
		}
	}
	return ids, origins
}

// name returns the origin of id, false for 0, free ids and ids never
// handed out.
func (t *ruleTable) name(id uint32) (policy.RuleOrigin, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == 0 || int(id) > len(t.names) || t.names[id-1] == (policy.RuleOrigin{}) {
		return policy.RuleOrigin{}, false
	}
	return t.names[id-1], true
}

// release frees id: its origin gets a new id next time.
func (t *ruleTable) release(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.names[id-1]; o != (policy.RuleOrigin{}) {
		delete(t.ids, o)
		t.names[id-1] = policy.RuleOrigin{}
		t.free = append(t.free, id)
		if t.without != nil {
			t.freed++
			t.without = nil // counted again should they still find none
		}
	}
}

// freedGen returns how many times ids were freed while some rule went
// without one.
func (t *ruleTable) freedGen() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.freed
}

// exhausted returns how many rules went without an id for lack of ids
// since Load (each once until ids are freed again).
func (t *ruleTable) exhausted() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unnamed
}

// reclaimRuleIDs frees the ids no inner map of either parity holds, when
// ids run short or some rule went without one: after the flip, the idle
// parity still holds the rules the flip retired, so an id is freed only
// once both parities moved on. Each freed id's count of allowed
// connections is first added to its policy's running total and its slot
// zeroed, so that a policy's count never goes down and the next rule to
// get the id starts from 0. It gives up (frees nothing) while an inner
// map's content is unknown (a failed write, maps of a previous agent):
// the next Apply replaces those. Called with d.mu held.
func (d *Datapath) reclaimRuleIDs(unnamed bool) {
	if !unnamed && !d.rules.short() {
		return
	}
	var inUse []map[policy.RuleKey]*policy.RuleOrigin
	for _, e := range d.mirror.eps {
		for _, im := range e.inner {
			if im == nil {
				continue
			}
			if !im.known {
				return
			}
			inUse = append(inUse, im.origins)
		}
	}
	held := d.rules.held(inUse)
	ids, origins := d.rules.named()
	zero := make([]uint64, ebpf.MustPossibleCPU())
	var perCPU []uint64
	var errs []error
	freed := 0
	for i, id := range ids {
		if _, ok := held[id]; ok {
			continue
		}
		if err := d.ruleAllowed.Lookup(id, &perCPU); err != nil {
			errs = append(errs, fmt.Errorf("read %s[%d]: %w", bpfmaps.RuleAllowedMap, id, err))
			continue
		}
		if err := d.ruleAllowed.Put(id, zero); err != nil {
			errs = append(errs, fmt.Errorf("zero %s[%d]: %w", bpfmaps.RuleAllowedMap, id, err))
			continue
		}
		d.verdicts.retire(origins[i], sum(perCPU))
		d.rules.release(id)
		freed++
	}
	if err := errors.Join(errs...); err != nil {
		d.log.Warn("reclaim policy rule ids; those not reclaimed stay in use", "err", err)
	}
	if freed > 0 {
		d.log.Debug("reclaimed policy rule ids no map holds", "ids", freed)
	}
}

// noteUnnamed logs, once, that rules went without an id, and records
// whether any rule of the live parity still has none. Called with d.mu held, after
// an Apply's writes.
func (d *Datapath) noteUnnamed(now bool) {
	if now && !d.unnamedLogged {
		d.unnamedLogged = true
		d.log.Warn("policy rule ids exhausted: the rules are enforced, but their events name no rule and their connections count for no policy until ids are free again",
			"ids", d.rules.limit(), "metric", "lockstep_datapath_rule_ids_exhausted_total")
	}
	live, unnamed := int(d.mirror.gen&1), false
	for _, e := range d.mirror.eps {
		im := e.inner[live]
		unnamed = unnamed || (im != nil && im.unnamed)
	}
	d.unnamedLive.Store(unnamed)
}

// RuleOrigin returns the policy rule whose id a verdict event carries
// (bpfmaps.Event.Rule), false for 0 (no rule decided, or rule ids were
// exhausted) and ids this agent does not know (never written, or freed
// since).
func (d *Datapath) RuleOrigin(id uint32) (policy.RuleOrigin, bool) { return d.rules.name(id) }

// RuleIDsExhausted reports whether some rule in force carries id 0
// because the rule ids ran out when it was written: the allowed events
// of an isolated direction that carry no rule are then likely its.
func (d *Datapath) RuleIDsExhausted() bool { return d.unnamedLive.Load() }

// RuleIDsExhaustedTotal returns how many rules were written with id 0
// for lack of ids since Load.
func (d *Datapath) RuleIDsExhaustedTotal() uint64 { return d.rules.exhausted() }
