//go:build linux

package datapath

import (
	"errors"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
)

// TestRuleTableLimit checks that ids run from 1 to the limit, that a rule
// seen before keeps its id once the ids are out, and that a new one is
// refused with ErrRuleIDs rather than given a used id.
func TestRuleTableLimit(t *testing.T) {
	t.Parallel()
	tab := ruleTable{max: 2}
	a := policy.RuleOrigin{Namespace: "ns", Name: "a"}
	b := policy.RuleOrigin{Namespace: "ns", Name: "b"}
	c := policy.RuleOrigin{Namespace: "ns", Name: "c"}
	for _, tc := range []struct {
		o      policy.RuleOrigin
		want   uint32
		refuse bool
	}{{a, 1, false}, {b, 2, false}, {c, 0, true}, {a, 1, false}, {c, 0, true}} {
		id, err := tab.id(tc.o)
		if id != tc.want || errors.Is(err, ErrRuleIDs) != tc.refuse {
			t.Errorf("id(%v) = %d, %v; want %d, refused %v", tc.o, id, err, tc.want, tc.refuse)
		}
	}
	if got := len(tab.all()); got != 2 {
		t.Errorf("%d ids handed out, want 2", got)
	}
	if (&ruleTable{}).limit() != 16383 {
		t.Errorf("default limit %d, want 16383 (lockstep_rule_allowed's size less id 0)", (&ruleTable{}).limit())
	}
}
