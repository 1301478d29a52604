package iptables

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestApplyOrderSetsRulesDestroy: a change that swaps the set a rule uses
// runs (1) one ipset restore creating the new set, (2) one iptables-restore
// per family, (3) one ipset restore destroying the old set — never a
// destroy before the rules that referenced the set are gone.
func TestApplyOrderSetsRulesDestroy(t *testing.T) {
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			n := newFakeNode()
			a, b := twoPods(300), twoPods(301)
			d := newTestDataplane(t, m, n, a)
			mustApply(t, d, a)
			n.takeCalls()
			mustApply(t, d, b)
			calls := n.takeCalls()
			var got []string
			for _, c := range calls {
				got = append(got, c.String())
			}
			if len(got) == 4 {
				slices.Sort(got[1:3]) // the families of step 2 may run concurrently
				slices.SortFunc(calls[1:3], func(a, b fakeCall) int { return strings.Compare(a.String(), b.String()) })
			}
			want := []string{
				"ipset -exist restore",
				m.RestoreTool(IPv4) + " -w 5 --noflush",
				m.RestoreTool(IPv6) + " -w 5 --noflush",
				"ipset -exist restore",
			}
			slices.Sort(want[1:3])
			if !slices.Equal(got, want) {
				t.Fatalf("calls %q, want %q", got, want)
			}
			p := setPrefix(m, IPv4)
			if s := calls[0].stdin; !strings.Contains(s, "create "+p+"id-301 hash:ip") || !strings.Contains(s, "add "+p+"id-301 10.0.0.2") || strings.Contains(s, "destroy") {
				t.Errorf("step 1 must create and fill the new set only:\n%s", s)
			}
			v4 := calls[1]
			if v4.name != m.RestoreTool(IPv4) {
				v4 = calls[2]
			}
			if s := v4.stdin; !strings.Contains(s, "--match-set "+p+"id-301 src") {
				t.Errorf("step 2 must switch the rule to the new set:\n%s", s)
			}
			wantDestroy := "destroy " + p + "id-300\ndestroy " + setPrefix(m, IPv6) + "id-300\n"
			if calls[3].stdin != wantDestroy {
				t.Errorf("step 3:\n%s\nwant:\n%s", calls[3].stdin, wantDestroy)
			}
			assertNoViolations(t, n)
			assertView(t, n, m, b)
		})
	}
}

// TestApplyDiff: after a full apply, each change touches only what
// changed.
func TestApplyDiff(t *testing.T) {
	base := manyEndpoints(50, 0)
	oneRule := manyEndpoints(50, 0)
	oneRule.Endpoints["ep7"] = manyEndpoints(50, 1).Endpoints["ep7"]
	added := manyEndpoints(51, 0)
	removed := manyEndpoints(49, 0)
	newPeer := manyEndpoints(50, 0)
	newPeer.Endpoints["ep7"] = &policy.EndpointPolicy{IPv4: base.Endpoints["ep7"].IPv4, IngressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}: ports(53, 53)}}
	tests := []struct {
		name       string
		next       *policy.Desired
		wantCalls  int
		wantChains []string // chains the IPv4 payload touches
		wantLines  []string // lines the IPv4 payload must have
	}{
		{name: "nothing changed", next: manyEndpoints(50, 0), wantCalls: 0},
		{name: "one endpoint's port", next: oneRule, wantCalls: 1, // IPv6 has no member of the peers: no rule there
			wantChains: []string{"LOCKSTEP-I-ep7"},
			wantLines:  []string{"-I LOCKSTEP-I-ep7 1 -j DROP"}}, // new content over the old: no rule deleted
		{name: "one endpoint more", next: added, wantCalls: 2, // its peers' sets exist already
			wantChains: []string{"LOCKSTEP-E-ep50", "LOCKSTEP-FORWARD", "LOCKSTEP-I-ep50", "LOCKSTEP-INPUT"},
			wantLines:  []string{"-A LOCKSTEP-FORWARD -i ep50 -j LOCKSTEP-E-ep50", "-A LOCKSTEP-FORWARD -o ep50 -j LOCKSTEP-I-ep50"}},
		{name: "one endpoint less", next: removed, wantCalls: 3, // destroys its union set of 349 and 300
			wantChains: []string{"LOCKSTEP-E-ep49", "LOCKSTEP-FORWARD", "LOCKSTEP-I-ep49", "LOCKSTEP-INPUT"},
			wantLines:  []string{"-D LOCKSTEP-FORWARD -i ep49 -j LOCKSTEP-E-ep49", "-X LOCKSTEP-I-ep49"}},
		{name: "a rule needing a new set", next: newPeer, wantCalls: 4, // destroys ep7's union set of 307 and 308
			wantChains: []string{"LOCKSTEP-E-ep7", "LOCKSTEP-I-ep7"}, // egress no longer isolated
			wantLines:  []string{"-A LOCKSTEP-I-ep7 -p udp -m set ! --match-set lockstep-nft4-pods src -m udp --dport 53 -j RETURN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			d := newTestDataplane(t, ModeNFT, n, base, tt.next)
			mustApply(t, d, base)
			n.takeCalls()
			mustApply(t, d, tt.next)
			calls := n.takeCalls()
			if len(calls) != tt.wantCalls {
				t.Fatalf("%d calls, want %d: %v", len(calls), tt.wantCalls, calls)
			}
			for _, c := range calls {
				if c.name != ModeNFT.RestoreTool(IPv4) {
					continue
				}
				if got := payloadChains(c.stdin); !slices.Equal(got, tt.wantChains) {
					t.Errorf("payload touches %q, want %q:\n%s", got, tt.wantChains, c.stdin)
				}
				for _, line := range tt.wantLines {
					if !strings.Contains(c.stdin, line+"\n") {
						t.Errorf("payload lacks %q:\n%s", line, c.stdin)
					}
				}
			}
			assertView(t, n, ModeNFT, tt.next)
		})
	}
}

// TestApplyFailureRepairs fails each command of an Apply with each kind of
// fault: the Apply reports it, nothing is left referencing a missing set,
// and the next Apply (reading the state back when it must) converges.
func TestApplyFailureRepairs(t *testing.T) {
	from, to := twoPods(300), twoPods(301)
	for call := 1; call <= 4; call++ {
		for _, fl := range []fault{faultBefore, faultPartial, faultAfter} {
			t.Run(fmt.Sprintf("call%d/fault%d", call, fl), func(t *testing.T) {
				n := newFakeNode()
				d := newTestDataplane(t, ModeLegacy, n, from, to)
				mustApply(t, d, from)
				count := 0
				n.faults = func(fakeCall) fault {
					count++
					if count == call {
						return fl
					}
					return faultNone
				}
				if err := d.Apply(to); err == nil {
					t.Fatal("Apply succeeded through a failed command")
				}
				n.faults = nil
				n.takeCalls()
				mustApply(t, d, to)
				reread := slices.ContainsFunc(n.takeCalls(), func(c fakeCall) bool { return c.String() == "ipset save" })
				if reread != (call < 4) {
					t.Errorf("after a failure at call %d the next Apply read the state back: %v, want %v", call, reread, call < 4)
				}
				assertNoViolations(t, n)
				assertView(t, n, ModeLegacy, to)
				if s := d.Stats(); s.Failures != 1 || s.Applies != 3 {
					t.Errorf("stats %+v, want 3 applies and 1 failure", s)
				}
			})
		}
	}
}

// TestApplyRepairsDrift: after Invalidate, Apply reads the tables back and
// removes whatever lockstep did not write, or restores what it lost.
func TestApplyRepairsDrift(t *testing.T) {
	want := manyEndpoints(5, 0)
	tests := []struct {
		name  string
		drift func(n *fakeNode)
	}{
		{"a rule deleted", func(n *fakeNode) {
			t := n.tables[tableKey{ModeNFT, IPv4, "filter"}]
			t.chains["LOCKSTEP-I-ep2"] = t.chains["LOCKSTEP-I-ep2"][1:]
		}},
		{"a stale lockstep chain with a jump", func(n *fakeNode) {
			t := n.tables[tableKey{ModeNFT, IPv6, "filter"}]
			t.chains["LOCKSTEP-E-gone"] = []string{"-j DROP"}
			t.chains["FORWARD"] = append(t.chains["FORWARD"], "-j LOCKSTEP-E-gone")
		}},
		{"the hook jump moved and doubled", func(n *fakeNode) {
			t := n.tables[tableKey{ModeNFT, IPv4, "filter"}]
			t.chains["FORWARD"] = append([]string{"-j ACCEPT"}, append(t.chains["FORWARD"], t.chains["FORWARD"]...)...)
		}},
		{"a stale set and a changed member", func(n *fakeNode) {
			n.sets["lockstep-nft4-id-999"] = newSet(IPv4, false)
			n.sets["lockstep-nft4-net-1"].entries[prefix("172.16.5.0/24")] = false
		}},
		{"chains gone", func(n *fakeNode) {
			delete(n.tables, tableKey{ModeNFT, IPv4, "filter"})
		}},
		{"the OUTPUT hook of an earlier version", func(n *fakeNode) {
			seedRules(t, n, ModeNFT, IPv4, earlierOutputHook("ep0", "ep3"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			d := newTestDataplane(t, ModeNFT, n, want)
			mustApply(t, d, want)
			tt.drift(n)
			mustApply(t, d, want) // believes nothing changed
			if diffViews(n.view(ModeNFT), expectedView(t, ModeNFT, want)) == "" {
				t.Fatal("the drift is invisible: the test proves nothing")
			}
			d.Invalidate()
			mustApply(t, d, want)
			assertView(t, n, ModeNFT, want)
			if fwd := n.tables[tableKey{ModeNFT, IPv4, "filter"}].chains["FORWARD"]; !strings.HasSuffix(fwd[0], "-j "+chainForward) {
				t.Errorf("FORWARD starts with %q, want lockstep's jump first", fwd[0])
			}
		})
	}
}

// earlierOutputHook is the restore payload that adds what lockstep
// versions before the node's own traffic was exempt wrote beside today's
// chains: a LOCKSTEP-OUTPUT chain jumping to the endpoints' ingress
// chains, jumped to from OUTPUT.
func earlierOutputHook(ifs ...string) string {
	var b strings.Builder
	b.WriteString("*filter\n:LOCKSTEP-OUTPUT - [0:0]\n")
	for _, name := range ifs {
		fmt.Fprintf(&b, "-A LOCKSTEP-OUTPUT -o %s -j %s%s\n", name, ingressPrefix, name)
	}
	b.WriteString("-I OUTPUT 1 -m comment --comment \"" + jumpComment + "\" -j LOCKSTEP-OUTPUT\nCOMMIT\n")
	return b.String()
}

// TestApplyRemovesEarlierOutputHook: a node that an earlier version left
// with the OUTPUT hook (node-to-pod traffic judged by the pods' ingress
// chains) loses it on the first Apply of a new Dataplane, the agent's
// first after an upgrade, in both families; node-to-pod traffic then
// meets no lockstep rule.
func TestApplyRemovesEarlierOutputHook(t *testing.T) {
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			n := newFakeNode()
			want := manyEndpoints(3, 0)
			mustApply(t, newTestDataplane(t, m, n, want), want)
			for _, f := range families {
				seedRules(t, n, m, f, earlierOutputHook("ep0", "ep1", "ep2"))
			}
			toPod := testPacket{hook: "OUTPUT", out: "ep1", src: addr("10.9.9.9"), dst: want.Endpoints["ep1"].IPv4, proto: 6, dport: 22}
			if ok, err := n.evalFake(m, toPod); err != nil || ok {
				t.Fatalf("before the upgrade: the node's packet to ep1 allowed=%v (%v), want dropped: the test proves nothing", ok, err)
			}
			mustApply(t, newTestDataplane(t, m, n, want), want)
			assertNoViolations(t, n)
			assertView(t, n, m, want)
			if ok, err := n.evalFake(m, toPod); err != nil || !ok {
				t.Errorf("after the upgrade: the node's packet to ep1 allowed=%v (%v), want allowed", ok, err)
			}
		})
	}
}

// TestApplyElidesEmptySets: a rule whose peer has no member in a family
// is left out of that family, and its set not created. When the peer
// gains a member, the set comes in step 1 and the rule in step 2; when it
// loses it, the rule goes in step 2 and the set in step 3.
func TestApplyElidesEmptySets(t *testing.T) {
	v4only := twoPods(300)
	delete(v4only.Addrs, addr("fd00::1"))
	dual := twoPods(300)
	n := newFakeNode()
	d := newTestDataplane(t, ModeNFT, n, dual)
	v6rule := "-p tcp -m set --match-set lockstep-nft6-id-300 src -m tcp --dport 80 -j RETURN"
	steps := []struct {
		name     string
		state    *policy.Desired
		calls    []string
		rule, v6 bool
	}{
		{"IPv4 members only", v4only, nil, false, false},
		{"an IPv6 member arrives", dual, []string{"ipset -exist restore", "ip6tables-nft-restore -w 5 --noflush"}, true, true},
		{"and leaves", v4only, []string{"ip6tables-nft-restore -w 5 --noflush", "ipset -exist restore"}, false, false},
	}
	for i, step := range steps {
		n.takeCalls()
		mustApply(t, d, step.state)
		calls := n.takeCalls()
		if i > 0 {
			var got []string
			for _, c := range calls {
				got = append(got, c.String())
			}
			if !slices.Equal(got, step.calls) {
				t.Errorf("%s: calls %q, want %q", step.name, got, step.calls)
			}
		}
		v := n.view(ModeNFT)
		if _, ok := v.sets["lockstep-nft6-id-300"]; ok != step.v6 {
			t.Errorf("%s: IPv6 set exists=%v, want %v", step.name, ok, step.v6)
		}
		if got := slices.Contains(v.chains[IPv6.index()]["LOCKSTEP-I-ls-a"], v6rule); got != step.rule {
			t.Errorf("%s: IPv6 rule present=%v, want %v", step.name, got, step.rule)
		}
		assertNoViolations(t, n)
		assertView(t, n, ModeNFT, step.state)
	}
}

func TestApplyRequiresAttach(t *testing.T) {
	d := newTestDataplane(t, ModeNFT, newFakeNode())
	err := d.Apply(twoPods(300))
	if !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "ls-a") {
		t.Fatalf("got %v, want ErrNotAttached naming ls-a", err)
	}
	if err := d.Attach("bad+"); !errors.Is(err, ErrBadIfName) {
		t.Fatalf("Attach(bad+) = %v, want ErrBadIfName", err)
	}
}

// TestApplyLeavesOtherModeAlone: a legacy dataplane's leftovers (chains
// and sets) survive an nft dataplane's applies untouched, and vice versa.
func TestApplyLeavesOtherModeAlone(t *testing.T) {
	n := newFakeNode()
	old := twoPods(300)
	mustApply(t, newTestDataplane(t, ModeLegacy, n, old), old)
	legacy := n.view(ModeLegacy)
	now := twoPods(301)
	mustApply(t, newTestDataplane(t, ModeNFT, n, now), now)
	if diff := diffViews(n.view(ModeLegacy), legacy); diff != "" {
		t.Fatalf("the nft dataplane changed legacy state:\n%s", diff)
	}
	assertView(t, n, ModeNFT, now)
}

func TestApplyDisableIPv6(t *testing.T) {
	n := newFakeNode()
	d, err := New(Options{Mode: ModeNFT, Runner: n, DisableIPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	want := twoPods(300)
	attachAll(t, d, want)
	mustApply(t, d, want)
	for _, c := range n.takeCalls() {
		if strings.HasPrefix(c.name, "ip6tables") || strings.Contains(c.stdin, "nft6") {
			t.Errorf("IPv6 disabled, but %s ran with %q", c, c.stdin)
		}
	}
}

func TestStats(t *testing.T) {
	n := newFakeNode()
	want := twoPods(300)
	d := newTestDataplane(t, ModeNFT, n, want)
	mustApply(t, d, want)
	s := d.Stats()
	v := n.view(ModeNFT)
	chains, rules := 0, 0
	for _, cs := range v.chains {
		chains += len(cs)
		for _, rs := range cs {
			rules += len(rs)
		}
	}
	entries := 0
	for _, e := range v.sets {
		entries += len(e)
	}
	if s.Mode != ModeNFT || s.Sets != len(v.sets) || s.SetEntries != entries || s.Chains != chains || s.Rules != rules ||
		s.Applies != 1 || s.FullReconciles != 1 || s.LastApply <= 0 {
		t.Fatalf("stats %+v; node has %d sets, %d entries, %d chains, %d rules", s, len(v.sets), entries, chains, rules)
	}
	if got := slices.Sorted(maps.Keys(v.sets)); !slices.Equal(got, []string{"lockstep-nft4-id-300", "lockstep-nft6-id-300"}) {
		t.Errorf("sets %v", got)
	}
}

// TestApplyPrependsThenClearsDeadRules: with iptables-nft a changed chain
// gets its new content inserted over the old, so a change deletes no rule;
// the dead rules stay within the budget, a commit that exceeds it flushes
// them, and the reachable rules and sets are always those of a fresh apply.
func TestApplyPrependsThenClearsDeadRules(t *testing.T) {
	n := newFakeNode()
	d := newTestDataplane(t, ModeNFT, n, manyEndpoints(50, 0))
	mustApply(t, d, manyEndpoints(50, 0))
	flushed, sawDead := false, false
	for shift := range uint16(40) {
		want := manyEndpoints(50, shift+1)
		n.takeCalls()
		mustApply(t, d, want)
		for _, c := range n.takeCalls() {
			if c.name == ModeNFT.RestoreTool(IPv4) && strings.Contains(c.stdin, "\n-F ") {
				flushed = true
			}
		}
		dead, both := 0, 0
		for _, n := range d.applied.dead[IPv4.index()] {
			dead += n
		}
		for _, fam := range d.applied.dead {
			for _, n := range fam {
				both += n
			}
		}
		if dead > minDeadBudget {
			t.Fatalf("change %d: %d dead rules, budget %d", shift, dead, minDeadBudget)
		}
		if got := d.Stats().DeadRules; got != both {
			t.Fatalf("change %d: Stats().DeadRules = %d, the chains hold %d", shift, got, both)
		}
		sawDead = sawDead || both > 0
		assertNoViolations(t, n)
		assertView(t, n, ModeNFT, want)
		if got, fresh := d.Stats().Rules, freshRules(t, want); got != fresh {
			t.Fatalf("change %d: Stats().Rules = %d, a fresh apply has %d", shift, got, fresh)
		}
	}
	if !flushed {
		t.Error("dead rules were never cleared")
	}
	if !sawDead {
		t.Error("no change left dead rules: the test shows nothing")
	}
	// Compact (what the agent runs once idle) leaves none, with one
	// restore per family and nothing else run.
	want := manyEndpoints(50, 7)
	mustApply(t, d, want)
	if d.Stats().DeadRules == 0 {
		t.Fatal("no dead rules before Compact: the check below shows nothing")
	}
	n.takeCalls()
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.takeCalls() {
		if c.name != ModeNFT.RestoreTool(IPv4) && c.name != ModeNFT.RestoreTool(IPv6) {
			t.Errorf("Compact ran %s; want only iptables-restore", c.name)
		}
	}
	if got := d.Stats().DeadRules; got != 0 {
		t.Errorf("after Compact Stats().DeadRules = %d, want 0", got)
	}
	assertNoViolations(t, n)
	assertView(t, n, ModeNFT, want)
	if got, fresh := d.Stats().Rules, freshRules(t, want); got != fresh {
		t.Errorf("after Compact Stats().Rules = %d, a fresh apply has %d", got, fresh)
	}
	// And a full reconcile leaves none either.
	mustApply(t, d, manyEndpoints(50, 8))
	d.Invalidate()
	mustApply(t, d, manyEndpoints(50, 8))
	if got := d.Stats().DeadRules; got != 0 {
		t.Errorf("after a full reconcile Stats().DeadRules = %d, want 0", got)
	}
}

func freshRules(tb testing.TB, want *policy.Desired) int {
	d := newTestDataplane(tb, ModeNFT, newFakeNode(), want)
	mustApply(tb, d, want)
	return d.Stats().Rules
}

// TestStatsCountLiveRulesOnly: an endpoint that stops being isolated gets
// content that does not end in DROP, so prepending adds a terminal rule;
// Stats().Rules counts what a fresh apply has, the terminal not included.
func TestStatsCountLiveRulesOnly(t *testing.T) {
	n := newFakeNode()
	isolated := twoPods(300)
	d := newTestDataplane(t, ModeNFT, n, isolated)
	mustApply(t, d, isolated)
	open := twoPods(300)
	for name, ep := range open.Endpoints {
		cp := *ep
		cp.IngressIsolated = false
		open.Endpoints[name] = &cp
	}
	mustApply(t, d, open)
	if d.Stats().DeadRules == 0 {
		t.Fatal("the change left no dead rules: the test shows nothing")
	}
	if got, fresh := d.Stats().Rules, freshRules(t, open); got != fresh {
		t.Errorf("Stats().Rules = %d, a fresh apply has %d", got, fresh)
	}
	assertView(t, n, ModeNFT, open)
}

// TestApplyRefusesMappedPrefix: an IPv4-mapped IPv6 prefix in
// Desired.CIDRs would be an IPv4 class here (newCIDRIndex unmaps), as it
// would be an IPv4 key in the eBPF dataplane; both refuse it, and nothing
// is run.
func TestApplyRefusesMappedPrefix(t *testing.T) {
	n := newFakeNode()
	good := twoPods(300)
	d := newTestDataplane(t, ModeNFT, n, good)
	mustApply(t, d, good)
	n.takeCalls()
	for _, mapped := range []string{"::ffff:0.0.0.0/96", "::ffff:10.0.0.0/104"} {
		bad := *good
		bad.CIDRs = maps.Clone(good.CIDRs)
		bad.CIDRs[prefix(mapped)] = policyapi.CIDRClassBit | 1
		if err := d.Apply(&bad); !errors.Is(err, policyapi.ErrMappedPrefix) {
			t.Errorf("Apply with %s = %v, want an error wrapping policy.ErrMappedPrefix", mapped, err)
		}
		if calls := n.takeCalls(); len(calls) != 0 {
			t.Errorf("Apply with %s ran %d commands, want none", mapped, len(calls))
		}
	}
	assertView(t, n, ModeNFT, good)
}
