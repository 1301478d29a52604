//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"sync"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
)

// ErrRuleIDs is wrapped by the error of an Apply that needs a rule id
// when all bpfmaps.MaxRuleIDs-1 have been handed out. Ids are not reused
// while the agent runs (events and counts name rules by them), so the
// node's policy then stays as last applied until the agent restarts.
var ErrRuleIDs = errors.New("out of policy rule ids")

// ruleTable names the rule ids the datapath writes into policy map values
// (bpfmaps.PolicyValue.Rule), which the programs copy into the verdict
// events of the connections they allow: the kernel reports a number, the
// agent turns it back into the policy rule (policy.RuleOrigin) it wrote it
// for. Ids start at 1 (0 is "no rule") and are never reused while the
// agent runs, so an event read after the policy changed still names the
// rule that decided it; the table grows only with rules it has not seen
// before. The ids index lockstep_rule_allowed (bpfmaps.RuleAllowedMap),
// which bounds them: once bpfmaps.MaxRuleIDs-1 are out, a rule not seen
// before gets none and its Apply fails (ErrRuleIDs), rather than share
// an id, and so the counts, with another rule.
type ruleTable struct {
	mu    sync.Mutex
	ids   map[policy.RuleOrigin]uint32
	names []policy.RuleOrigin // names[id-1]
	max   int                 // ids handed out at most; 0: bpfmaps.MaxRuleIDs-1 (tests lower it)
}

// id returns the id of o, allocating one the first time; an error
// wrapping ErrRuleIDs when o needs one and none is left.
func (t *ruleTable) id(o policy.RuleOrigin) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[o]; ok {
		return id, nil
	}
	if len(t.names) >= t.limit() {
		return 0, fmt.Errorf("name rule %s: all %d ids are in use: %w (restart the agent to renumber)", o, t.limit(), ErrRuleIDs)
	}
	if t.ids == nil {
		t.ids = make(map[policy.RuleOrigin]uint32)
	}
	t.names = append(t.names, o)
	id := uint32(len(t.names))
	t.ids[o] = id
	return id, nil
}

// limit is how many ids t hands out: max, or bpfmaps.MaxRuleIDs-1 when
// max is 0.
func (t *ruleTable) limit() int {
	if t.max > 0 {
		return t.max
	}
	return bpfmaps.MaxRuleIDs - 1
}

// idOf returns the id of the origin origins gives k, 0 when it has none.
func (t *ruleTable) idOf(origins map[policy.RuleKey]policy.RuleOrigin, k policy.RuleKey) (uint32, error) {
	o, ok := origins[k]
	if !ok {
		return 0, nil
	}
	return t.id(o)
}

// all returns the origins of ids 1 to len, in id order (all()[id-1]).
// The slice is shared: ids are only ever appended.
func (t *ruleTable) all() []policy.RuleOrigin {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[:len(t.names):len(t.names)]
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
