package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// RuleOrigin names the policy rule that allowed a [RuleKey] of an
// endpoint: the rule of policy Namespace/Name at Index (counted from 0)
// among the policy's rules of direction Dir. Verdict events name it, so
// that "why was this allowed" is answered with a policy, not a number.
//
// When several rules allow entries of one key, the key's origin is the
// smallest of them in the order of compareOrigin (name, direction,
// index): the same whatever order the policies arrived in, and so the
// same from [Compile] and [Incremental]. A key's ranges may come from
// several rules; the origin names the first of them, not necessarily the
// one whose range a given port falls in.
type RuleOrigin struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Dir       policyapi.Direction `json:"-"`
	Index     int                 `json:"index"`
}

// String formats the origin as "namespace/name ingress[0]", as lockstep explain names a rule.
func (o RuleOrigin) String() string {
	return fmt.Sprintf("%s/%s %s[%d]", o.Namespace, o.Name, o.Dir, o.Index)
}

// compareOrigin orders origins by namespace, name, direction and index.
func compareOrigin(a, b *RuleOrigin) int {
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Dir, b.Dir); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

// ruleOrigin returns a new origin of rule i of cp in direction d.
func ruleOrigin(cp *policyapi.ParsedPolicy, d policyapi.Direction, i int) *RuleOrigin {
	return &RuleOrigin{Namespace: cp.Namespace, Name: strings.TrimPrefix(cp.Name, cp.Namespace+"/"), Dir: d, Index: i}
}

// SameOrigin reports whether a and b name the same rule; nil is no
// rule. Origins are shared (see EndpointPolicy.Origins), so the pointers
// are most often equal.
func SameOrigin(a, b *RuleOrigin) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// origins returns the origin of every key of the last build that has one
// (see RuleOrigin), in a new map.
func (b *ruleBuilder) origins() map[RuleKey]*RuleOrigin {
	n := 0
	for _, g := range b.groups {
		if g.origin != nil {
			n++
		}
	}
	out := make(map[RuleKey]*RuleOrigin, n)
	for _, g := range b.groups {
		if g.origin != nil {
			out[g.k] = g.origin
		}
	}
	return out
}

// reorigin is origins for an endpoint whose origins were old, as rebuild
// is build: the same origins are old itself (changed false), and when
// few keys' origins changed, the new ones are a copy of old with those
// keys replaced, which is cheaper than inserting every key into a new
// map. An edit that keeps an endpoint's keys and their rules (a port
// range changed) so costs no allocation. It marks each group whose
// origin old gives its key (sameOrigin), for rebuild.
func (b *ruleBuilder) reorigin(old map[RuleKey]*RuleOrigin) (origins map[RuleKey]*RuleOrigin, changed bool) {
	n, found, same := 0, 0, 0
	for i := range b.groups {
		g := &b.groups[i]
		o, ok := old[g.k]
		g.sameOrigin = SameOrigin(o, g.origin)
		if g.origin == nil {
			continue
		}
		n++
		if ok {
			found++
		}
		if g.sameOrigin {
			same++
		}
	}
	if old != nil && same == n && found == len(old) {
		return old, false
	}
	removed := len(old) - found
	if old == nil || 2*(n-same+removed) > n {
		return b.origins(), true
	}
	origins = maps.Clone(old)
	if removed > 0 {
		for k := range origins {
			if b.originOf(k) == nil {
				delete(origins, k)
			}
		}
	}
	for _, g := range b.groups {
		if g.origin != nil && !g.sameOrigin {
			origins[g.k] = g.origin
		}
	}
	return origins, true
}

// originOf returns the origin of key k in the last build, nil when it
// has none or no such key.
func (b *ruleBuilder) originOf(k RuleKey) *RuleOrigin {
	if i, ok := slices.BinarySearchFunc(b.groups, k, compareGroupKey); ok {
		return b.groups[i].origin
	}
	return nil
}
