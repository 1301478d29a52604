package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestOverBudget: which namespaces the node's limits fail. Among
// namespaces of equal size none is preferred: the ones tied at the
// cut-off fail together, so a tenant cannot push another's namespace out
// by naming its own. Prefixes the node would not load (of policies that
// do not compile, of namespaces over their own budget) take no room.
func TestOverBudget(t *testing.T) {
	node := Limits{PrefixesPerNamespace: 4096, RulesPerNamespace: 4096, Prefixes: 32766}
	valid := func(prefixes int) policyCost { return policyCost{prefixes: prefixes, loaded: prefixes} }
	invalid := func(prefixes int) policyCost { return policyCost{prefixes: prefixes} }
	attack := map[string]policyCost{"prod": valid(4096)}
	for i := 1; i <= 7; i++ {
		attack[fmt.Sprintf("a%d", i)] = valid(4096)
	}
	withSmall := maps.Clone(attack)
	withSmall["small"] = valid(10)
	for _, tc := range []struct {
		name   string
		limits Limits
		costs  map[string]policyCost
		want   []string // the namespaces failed
	}{
		{
			name:   "seven namespaces as large as prod, named before it: all eight fail, prod not alone",
			limits: node,
			costs:  attack,
			want:   []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "prod"},
		},
		{
			name:   "a smaller namespace is kept while the tied ones fail",
			limits: node,
			costs:  withSmall,
			want:   []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "prod"},
		},
		{
			name:   "the largest fails alone when that is enough",
			limits: Limits{Prefixes: 450},
			costs:  map[string]policyCost{"x": valid(400), "y": valid(200), "z": valid(100)},
			want:   []string{"x"},
		},
		{
			name:   "a tie below the largest fails whole",
			limits: Limits{Prefixes: 450},
			costs:  map[string]policyCost{"x": valid(300), "y": valid(200), "z": valid(200), "w": valid(100)},
			want:   []string{"x", "y", "z"},
		},
		{
			name:   "prefixes of policies that do not compile take no room",
			limits: Limits{PrefixesPerNamespace: 4096, Prefixes: 4100},
			costs: map[string]policyCost{
				"prod": valid(4000),
				"a1":   invalid(4096), "a2": invalid(4096),
				"a3": valid(90).add(invalid(4000)),
			},
		},
		{
			name:   "invalid prefixes still count toward the namespace's own budget",
			limits: Limits{PrefixesPerNamespace: 4096, Prefixes: 32766},
			costs:  map[string]policyCost{"prod": valid(10), "a1": valid(10).add(invalid(4096))},
			want:   []string{"a1"},
		},
		{
			name:   "a namespace over its own budget takes no room on the node",
			limits: Limits{PrefixesPerNamespace: 4096, Prefixes: 5000},
			costs:  map[string]policyCost{"prod": valid(4096), "a1": valid(30000)},
			want:   []string{"a1"},
		},
		{
			name:   "within the node's bound nothing fails",
			limits: node,
			costs:  map[string]policyCost{"prod": valid(4096), "a1": valid(4096)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(tc.limits.overBudget(tc.costs)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("failed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOverBudgetIgnoresNames: for random costs, namespaces the node
// fails for room are never smaller than one it keeps, namespaces of equal
// size share their fate, what is kept fits, and renaming every namespace
// fails the same sizes.
func TestOverBudgetIgnoresNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 2000 {
		l := Limits{PrefixesPerNamespace: 50, Prefixes: 1 + rng.IntN(300)}
		costs := map[string]policyCost{}
		renamed := map[string]policyCost{}
		for i := range 1 + rng.IntN(12) {
			c := policyCost{prefixes: rng.IntN(8) * 8}
			if rng.IntN(4) > 0 {
				c.loaded = c.prefixes
			}
			costs[fmt.Sprintf("ns%02d", i)] = c
			renamed[fmt.Sprintf("zz%02d", 99-i)] = c
		}
		out := l.overBudget(costs)
		kept, keptMax, failedMin := 0, -1, 1<<30
		for ns, c := range costs {
			if c.prefixes > l.PrefixesPerNamespace {
				continue
			}
			if _, failed := out[ns]; failed {
				failedMin = min(failedMin, c.loaded)
			} else {
				kept += c.loaded
				keptMax = max(keptMax, c.loaded)
			}
		}
		if kept > l.Prefixes || keptMax >= failedMin {
			t.Fatalf("round %d: limits %+v costs %+v: failed %v; kept %d prefixes, largest kept %d, smallest failed %d",
				round, l, costs, out, kept, keptMax, failedMin)
		}
		if a, b := failedSizes(costs, out), failedSizes(renamed, l.overBudget(renamed)); !slices.Equal(a, b) {
			t.Fatalf("round %d: costs %+v: failed sizes %v, renamed %v", round, costs, a, b)
		}
	}
}

// failedSizes lists the costs of the namespaces out fails, sorted.
func failedSizes(costs map[string]policyCost, out map[string]string) []string {
	var s []string
	for ns := range out {
		s = append(s, fmt.Sprint(costs[ns]))
	}
	slices.Sort(s)
	return s
}

// TestNodeBudgetAttackByName is the scenario of a tenant creating eight
// namespaces as large as prod's, whose names sort before it, through
// Compile and the incremental compiler: prod's pod is failed only
// together with every namespace of its size, whatever prod is called.
func TestNodeBudgetAttackByName(t *testing.T) {
	for _, victim := range []string{"prod", "a0", "zzz"} {
		t.Run(victim, func(t *testing.T) {
			big := func(ns string) *policyapi.NetworkPolicy {
				return mkPolicy(ns, "p", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{
					// The cidr and its excepts: the namespace's whole budget.
					Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: exceptBlock(DefaultLimits.PrefixesPerNamespace - 1)}}}}})
			}
			sc := scenario{
				pods:     []*policyapi.Pod{mkPod(victim, "web", ips("10.0.0.1"), "app", "web")},
				policies: []*policyapi.NetworkPolicy{big(victim)},
				local:    []LocalEndpoint{{HostIfName: "lxc-web", Namespace: victim, PodName: "web", IPv4: addr("10.0.0.1")}},
			}
			// Eight namespaces at their budget fit the node; a ninth
			// does not.
			for i := 1; i <= 8; i++ {
				sc.policies = append(sc.policies, big(fmt.Sprintf("a%d", i)))
			}
			s := sc.snapshot()
			s.Limits = DefaultLimits
			got, err := Compile(s)
			if err != nil {
				t.Fatal(err)
			}
			inc := NewIncremental()
			inc.SetLimits(DefaultLimits)
			feedSnapshot(inc, s)
			if igot, err := inc.Compile(); err != nil {
				t.Fatalf("incremental compile: %v", err)
			} else if diff := diffDesired(igot, got); diff != "" {
				t.Errorf("incremental result differs from Compile:\n%s", diff)
			}
			if len(got.FailedPolicies) != 9 {
				t.Errorf("failed %v, want all nine namespaces at their budget failed together", slices.Sorted(maps.Keys(got.FailedPolicies)))
			}
			if why := got.FailedPolicies[victim+"/p"]; !strings.Contains(why, "equal share fail together") {
				t.Errorf("%s/p: reason %q, want the node's prefixes full, shared by the tie", victim, why)
			}
		})
	}
}
