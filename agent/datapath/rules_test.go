//go:build linux

package datapath

import (
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestRuleTableLimit checks that ids run from 1 to the limit, that a rule
// seen before keeps its id once the ids are out, that a new one then gets
// id 0 (counted once, until ids are freed again) rather than a used id or
// an error, and that a released
// id goes to the next new rule and no longer names the old one.
func TestRuleTableLimit(t *testing.T) {
	t.Parallel()
	tab := ruleTable{max: 2}
	a := policy.RuleOrigin{Namespace: "ns", Name: "a"}
	b := policy.RuleOrigin{Namespace: "ns", Name: "b"}
	c := policy.RuleOrigin{Namespace: "ns", Name: "c"}
	d := policy.RuleOrigin{Namespace: "ns", Name: "d"}
	steps := []struct {
		o       policy.RuleOrigin
		release uint32 // released before o asks for an id
		want    uint32
		unnamed uint64 // rules given id 0 so far
	}{
		{o: a, want: 1},
		{o: b, want: 2},
		{o: c, want: 0, unnamed: 1},
		{o: a, want: 1, unnamed: 1},
		{o: c, want: 0, unnamed: 1},
		{o: c, release: 1, want: 1, unnamed: 1},
		{o: a, want: 0, unnamed: 2},
		{o: a, want: 0, unnamed: 2},
		{o: d, release: 2, want: 2, unnamed: 2},
		{o: a, want: 0, unnamed: 3},
	}
	for i, s := range steps {
		if s.release != 0 {
			tab.release(s.release)
		}
		if id := tab.id(s.o); id != s.want {
			t.Errorf("step %d: id(%v) = %d, want %d", i, s.o, id, s.want)
		}
		if got := tab.exhausted(); got != s.unnamed {
			t.Errorf("step %d: %d rules unnamed, want %d", i, got, s.unnamed)
		}
	}
	if got := tab.freedGen(); got != 2 {
		t.Errorf("freedGen %d after two releases while rules went without ids, want 2", got)
	}
	for id, want := range map[uint32]policy.RuleOrigin{1: c, 2: d} {
		if o, ok := tab.name(id); !ok || o != want {
			t.Errorf("name(%d) = %v, %v; want %v", id, o, ok, want)
		}
	}
	if ids, _ := tab.named(); len(ids) != 2 {
		t.Errorf("%d ids in use, want 2", len(ids))
	}
	if (&ruleTable{}).limit() != 16383 {
		t.Errorf("default limit %d, want 16383 (lockstep_rule_allowed's size less id 0)", (&ruleTable{}).limit())
	}
}

// TestVerdictTotalsPrune checks that the sums of a policy that no longer
// isolates a local endpoint are dropped, and those of the others kept.
func TestVerdictTotalsPrune(t *testing.T) {
	t.Parallel()
	var v verdictTotals
	eg, in := policyapi.Egress, policyapi.Ingress
	v.add(1<<1|uint32(eg), 5, []string{"ns/a", "ns/b"}, eg)
	v.add(1<<1|uint32(in), 2, []string{"ns/b"}, in)
	v.retire(policy.RuleOrigin{Namespace: "ns", Name: "a", Dir: eg}, 3)
	v.retire(policy.RuleOrigin{Namespace: "ns", Name: "gone", Dir: eg}, 4)
	v.prune(map[policyDir]struct{}{{"ns/a", eg}: {}, {"ns/b", in}: {}})
	for _, tc := range []struct {
		pd               policyDir
		denied, retired  uint64
		hasDen, hasRetir bool
	}{
		{policyDir{"ns/a", eg}, 5, 3, true, true},
		{policyDir{"ns/b", in}, 2, 0, true, false},
		{policyDir{"ns/b", eg}, 0, 0, false, false},
		{policyDir{"ns/gone", eg}, 0, 0, false, false},
	} {
		d, hasD := v.denied[tc.pd]
		r, hasR := v.retired[tc.pd]
		if d != tc.denied || r != tc.retired || hasD != tc.hasDen || hasR != tc.hasRetir {
			t.Errorf("%v: denied %d (%v) retired %d (%v), want %d (%v) and %d (%v)",
				tc.pd, d, hasD, r, hasR, tc.denied, tc.hasDen, tc.retired, tc.hasRetir)
		}
	}
}
