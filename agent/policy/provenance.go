package policy

import (
	"cmp"
	"fmt"
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

// addOrigin records o as the origin of k in origins unless a smaller one
// is there already.
func addOrigin(origins map[RuleKey]RuleOrigin, k RuleKey, o *RuleOrigin) {
	if old, ok := origins[k]; ok && compareOrigin(&old, o) <= 0 {
		return
	}
	origins[k] = *o
}

// ruleOrigin is the origin of rule i of cp in direction d.
func ruleOrigin(cp *policyapi.ParsedPolicy, d policyapi.Direction, i int) RuleOrigin {
	return RuleOrigin{Namespace: cp.Namespace, Name: strings.TrimPrefix(cp.Name, cp.Namespace+"/"), Dir: d, Index: i}
}

// addRuleOrigin adds rule i of cp in direction d to ep's rules, as
// addRule does, and records it as the origin of the keys it gives.
func (c *compiler) addRuleOrigin(ep *EndpointPolicy, d policyapi.Direction, cp *policyapi.ParsedPolicy, i int, local []policyapi.NamedPort) {
	rules := make(map[RuleKey][]PortRange)
	c.addRule(rules, d, cp, cp.Rules[d][i], local)
	o := ruleOrigin(cp, d, i)
	for k, rs := range rules {
		ep.Rules[k] = append(ep.Rules[k], rs...)
		addOrigin(ep.Origins, k, &o)
	}
}
