//go:build linux

package datapath

import (
	"sync"

	"lockstep.dev/lockstep/agent/policy"
)

// ruleTable names the rule ids the datapath writes into policy map values
// (bpfmaps.PolicyValue.Rule), which the programs copy into the verdict
// events of the connections they allow: the kernel reports a number, the
// agent turns it back into the policy rule (policy.RuleOrigin) it wrote it
// for. Ids start at 1 (0 is "no rule") and are never reused while the
// agent runs, so an event read after the policy changed still names the
// rule that decided it; the table grows only with rules it has not seen
// before.
type ruleTable struct {
	mu    sync.Mutex
	ids   map[policy.RuleOrigin]uint32
	names []policy.RuleOrigin // names[id-1]
}

// id returns the id of o, allocating one the first time.
func (t *ruleTable) id(o policy.RuleOrigin) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[o]; ok {
		return id
	}
	if t.ids == nil {
		t.ids = make(map[policy.RuleOrigin]uint32)
	}
	t.names = append(t.names, o)
	id := uint32(len(t.names))
	t.ids[o] = id
	return id
}

// idOf returns the id of the origin origins gives k, 0 when it has none.
func (t *ruleTable) idOf(origins map[policy.RuleKey]policy.RuleOrigin, k policy.RuleKey) uint32 {
	o, ok := origins[k]
	if !ok {
		return 0
	}
	return t.id(o)
}

// name returns the origin of id, false for 0 and ids never handed out.
func (t *ruleTable) name(id uint32) (policy.RuleOrigin, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == 0 || int(id) > len(t.names) {
		return policy.RuleOrigin{}, false
	}
	return t.names[id-1], true
}

// RuleOrigin returns the policy rule whose id a verdict event carries
// (bpfmaps.Event.Rule), false for 0 (no rule decided) and ids this agent
// never wrote.
func (d *Datapath) RuleOrigin(id uint32) (policy.RuleOrigin, bool) { return d.rules.name(id) }
