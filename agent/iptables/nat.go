package iptables

import (
	"maps"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
)

// natUpdates is the part of a *nat block that turns the Service chains of
// one family from have into want, and the chains once it is committed.
// Dispatch chains change rule by rule; a frontend's chain whose backends
// changed is flushed and refilled; chains want lacks are flushed, the
// jumps to them deleted, then the chains deleted. The hooks from
// PREROUTING and POSTROUTING come with the first chains and go with the
// last. After a read (read set, foreign the jumps into the chains from
// other chains), every wanted chain is rewritten, every other Service
// chain deleted and the hooks put back first in their chains.
func natUpdates(have, want map[string][]string, read bool, foreign []string) ([]string, map[string][]string) {
	next := make(map[string][]string, len(want))
	var decl, dels, adds, drops []string
	for _, c := range sortedKeys(want) {
		rules := want[c]
		old, ok := have[c]
		next[c] = rules
		switch {
		case read || !ok:
			if ok {
				decl = append(decl, "-F "+c)
			} else {
				decl = append(decl, ":"+c+" - [0:0]")
			}
			for _, r := range rules {
				adds = append(adds, "-A "+c+" "+r)
			}
		case isNATDispatch(c):
			if slices.Equal(old, rules) {
				break
			}
			rm, add, merged := diffRules(old, rules)
			for _, r := range rm {
				dels = append(dels, "-D "+c+" "+r)
			}
			for _, r := range add {
				adds = append(adds, "-A "+c+" "+r)
			}
			next[c] = merged
		case !sameRules(old, rules):
			decl = append(decl, "-F "+c)
			for _, r := range rules {
				adds = append(adds, "-A "+c+" "+r)
			}
		}
	}
	for _, c := range sortedKeys(have) {
		if _, ok := want[c]; !ok {
			decl = append(decl, "-F "+c)
			drops = append(drops, "-X "+c)
		}
	}
	switch {
	case read:
		for _, r := range foreign {
			dels = append(dels, "-D"+strings.TrimPrefix(r, "-A"))
		}
		if len(want) > 0 {
			adds = append(adds, natHookRules("-I", " 1")...)
		}
	case len(have) == 0 && len(want) > 0:
		adds = append(adds, natHookRules("-I", " 1")...)
	case len(have) > 0 && len(want) == 0:
		dels = append(dels, natHookRules("-D", "")...)
	}
	return slices.Concat(decl, dels, adds, drops), next
}

// natHookRules are the jumps from the built-in nat chains, for op (-I or
// -D) and pos after the chain's name.
func natHookRules(op, pos string) []string {
	out := make([]string, 0, len(natHooks))
	for _, h := range natHooks {
		out = append(out, op+" "+h.builtin+pos+" -m comment --comment \""+svcComment+"\" -j "+h.chain)
	}
	return out
}

// natBlock wraps the lines of a nat commit; nil for none.
func natBlock(lines []string) []byte {
	if len(lines) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// shrinkNAT is the nat table of family f that an Apply commits before the
// filter table, when both change: the translation in force (have, from
// the services prev) with every frontend narrowed to the backends it
// keeps in next, and the endpoints that stay. The filter commit follows,
// then the nat table of the plan (want): a backend therefore receives new
// connections through a Service only while the policy in force is one
// under which the state it belongs to sends them there (see doc.go,
// "Services: the order of commits").
//
// It also returns the frontends that translate to nothing in between
// (their old and new backends are disjoint, or they come or go): they
// must be refused, not left untranslated to meet a policy that judges
// the frontend's address as if it were a host, until the plan's nat table
// translates them or the Apply ends.
func (r *renderer) shrinkNAT(f Family, have, want map[string][]string, prev, next map[policy.ServiceFrontend]*policy.ServiceEntry) (map[string][]string, []policy.ServiceFrontend) {
	var refuse []policy.ServiceFrontend
	mid := maps.Clone(have)
	keep := map[string]bool{}
	of := func(fr policy.ServiceFrontend) bool { return familyOf(fr.Addr.Unmap()) == f }
	for fr, old := range prev {
		if !of(fr) || len(old.Backends) == 0 {
			continue
		}
		nw := next[fr]
		var common []policy.ServiceBackend
		if nw != nil {
			common = intersectBackends(old.Backends, nw.Backends)
		}
		if len(common) == 0 {
			refuse = append(refuse, unmapFrontend(fr))
			continue
		}
		c := svcChainName(fr)
		keep[c] = true
		if len(common) < len(old.Backends) || nw.AffinityTimeout != old.AffinityTimeout {
			mid[c] = renderDNAT(fr, nw.AffinityTimeout, common)
		}
	}
	for fr, nw := range next {
		if old := prev[fr]; of(fr) && len(nw.Backends) > 0 && (old == nil || len(old.Backends) == 0) {
			refuse = append(refuse, unmapFrontend(fr))
		}
	}
	if len(have) > 0 {
		mid[chainSvcAll] = slices.DeleteFunc(slices.Clone(have[chainSvcAll]), func(rule string) bool {
			return !keep[ruleTarget(strings.Fields(rule))]
		})
		stay := map[string]bool{}
		for _, rule := range want[chainSvcPods] {
			stay[rule] = true
		}
		mid[chainSvcPods] = slices.DeleteFunc(slices.Clone(have[chainSvcPods]), func(rule string) bool { return !stay[rule] })
	}
	slices.SortFunc(refuse, compareFrontends)
	return mid, refuse
}

// intersectBackends returns the backends in both a and b (each sorted by
// address, then port, each once), in that order: one pass over both.
func intersectBackends(a, b []policy.ServiceBackend) []policy.ServiceBackend {
	var out []policy.ServiceBackend
	for len(a) > 0 && len(b) > 0 {
		switch c := compareBackendAddr(a[0], b[0]); {
		case c < 0:
			a = a[1:]
		case c > 0:
			b = b[1:]
		default:
			out = append(out, a[0])
			a, b = a[1:], b[1:]
		}
	}
	return out
}

// compareBackendAddr orders backends by address, then port: what the nat
// table translates to (policy.ServiceBackend.Local is the eBPF dataplane's).
func compareBackendAddr(a, b policy.ServiceBackend) int {
	a.Local, b.Local = false, false
	return policy.CompareBackend(a, b)
}
