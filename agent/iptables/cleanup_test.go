package iptables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// seedRules commits an iptables-restore payload into the fake.
func seedRules(tb testing.TB, n *fakeNode, m Mode, f Family, payload string) {
	tb.Helper()
	if _, err := n.Run(context.Background(), m.RestoreTool(f), restoreArgs, []byte(payload)); err != nil {
		tb.Fatalf("seed rules: %v", err)
	}
}

func TestDetect(t *testing.T) {
	kubeRules := func(k int) string {
		s := "*filter\n:KUBE-FORWARD - [0:0]\n"
		for i := range k {
			s += fmt.Sprintf("-A KUBE-FORWARD -s 10.%d.0.0/16 -j ACCEPT\n", i)
		}
		return s + "COMMIT\n"
	}
	hint := "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	canary := "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	failNFT := func(c fakeCall) fault {
		if strings.Contains(c.name, "nft") {
			return faultBefore
		}
		return faultNone
	}
	tests := []struct {
		name    string
		seed    func(tb testing.TB, n *fakeNode)
		faults  func(fakeCall) fault
		want    Mode
		wantErr bool
	}{
		{name: "nothing anywhere: nft", seed: func(testing.TB, *fakeNode) {}, want: ModeNFT},
		{name: "kubelet hint in nft mangle wins over more legacy rules", seed: func(tb testing.TB, n *fakeNode) {
			seedRules(tb, n, ModeNFT, IPv6, hint)
			seedRules(tb, n, ModeLegacy, IPv4, kubeRules(20))
		}, want: ModeNFT},
		{name: "kubelet canary in legacy (IPv6)", seed: func(tb testing.TB, n *fakeNode) {
			seedRules(tb, n, ModeLegacy, IPv6, canary)
			seedRules(tb, n, ModeNFT, IPv4, kubeRules(20))
		}, want: ModeLegacy},
		{name: "more legacy rules", seed: func(tb testing.TB, n *fakeNode) {
			seedRules(tb, n, ModeLegacy, IPv4, kubeRules(3))
			seedRules(tb, n, ModeNFT, IPv6, kubeRules(2))
		}, want: ModeLegacy},
		{name: "a tie is nft", seed: func(tb testing.TB, n *fakeNode) {
			seedRules(tb, n, ModeLegacy, IPv4, kubeRules(2))
			seedRules(tb, n, ModeNFT, IPv4, kubeRules(2))
		}, want: ModeNFT},
		{name: "lockstep's own legacy leftovers do not vote", seed: func(tb testing.TB, n *fakeNode) {
			d := twoPods(300)
			mustApply(tb, newTestDataplane(tb, ModeLegacy, n, d), d)
			seedRules(tb, n, ModeNFT, IPv4, kubeRules(1))
		}, want: ModeNFT},
		{name: "nft tools fail, legacy has rules", seed: func(tb testing.TB, n *fakeNode) {
			seedRules(tb, n, ModeLegacy, IPv4, kubeRules(1))
		}, faults: failNFT, want: ModeLegacy},
		{name: "every tool fails", seed: func(testing.TB, *fakeNode) {}, faults: func(fakeCall) fault { return faultBefore }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			tt.seed(t, n)
			n.faults = tt.faults
			got, err := Detect(context.Background(), n)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Detect = %v, %v; want %v (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// legacyLeftovers is a node where a legacy lockstep ran (and still has
// its rules and sets), next to kube-proxy's rules and a live nft lockstep.
func legacyLeftovers(tb testing.TB) *fakeNode {
	tb.Helper()
	n := newFakeNode()
	for _, f := range families {
		seedRules(tb, n, ModeLegacy, f, "*filter\n:KUBE-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\n-A KUBE-FORWARD -j ACCEPT\nCOMMIT\n")
	}
	old := manyEndpoints(3, 0)
	mustApply(tb, newTestDataplane(tb, ModeLegacy, n, old), old)
	now := twoPods(300)
	mustApply(tb, newTestDataplane(tb, ModeNFT, n, now), now)
	return n
}

// TestCleanupFinishesAnyPartialState (seed 002): whatever a clean-up
// that stopped half-way left, Cleanup removes every lockstep jump and
// chain of legacy iptables, with legacy tools only, and touches neither
// other rules nor nft.
func TestCleanupFinishesAnyPartialState(t *testing.T) {
	tests := []struct {
		name    string
		partial func(n *fakeNode)
	}{
		{"nothing done yet", func(*fakeNode) {}},
		{"jumps deleted, chains left with their rules", func(n *fakeNode) {
			for _, f := range families {
				t := n.tables[tableKey{ModeLegacy, f, "filter"}]
				for _, b := range builtins("filter") {
					t.chains[b] = slices.DeleteFunc(t.chains[b], func(r string) bool { return strings.Contains(r, chainPrefix) })
				}
			}
		}},
		{"chains flushed, not deleted, jumps left", func(n *fakeNode) {
			for c := range n.tables[tableKey{ModeLegacy, IPv4, "filter"}].chains {
				if isLockstepChain(c) {
					n.tables[tableKey{ModeLegacy, IPv4, "filter"}].chains[c] = nil
				}
			}
		}},
		{"IPv4 done, IPv6 not", func(n *fakeNode) {
			delete(n.tables, tableKey{ModeLegacy, IPv4, "filter"})
		}},
		{"an earlier version's OUTPUT hook", func(n *fakeNode) {
			for _, f := range families {
				seedRules(t, n, ModeLegacy, f, earlierOutputHook("ep0", "ep2"))
			}
		}},
		{"a jump from a foreign user chain and a chain in another table", func(n *fakeNode) {
			t := n.tables[tableKey{ModeLegacy, IPv4, "filter"}]
			t.chains["KUBE-FORWARD"] = append(t.chains["KUBE-FORWARD"], "-s 10.9.0.0/16 -j LOCKSTEP-FORWARD")
			nat := n.table(tableKey{ModeLegacy, IPv4, "nat"})
			nat.chains["LOCKSTEP-OLD"] = []string{"-j RETURN"}
			nat.chains["PREROUTING"] = []string{"-j LOCKSTEP-OLD"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := legacyLeftovers(t)
			nft := n.view(ModeNFT)
			tt.partial(n)
			n.takeCalls()
			l, err := Cleanup(context.Background(), n, ModeLegacy)
			if err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			if l.HasRules() || len(l.Sets) == 0 {
				t.Fatalf("left %s: want no rules, the sets still there", l)
			}
			for _, c := range n.takeCalls() {
				if c.name != ipsetTool && !strings.Contains(c.name, "-legacy-") {
					t.Errorf("cleaning legacy ran %s", c)
				}
			}
			for _, f := range families {
				kube := n.tables[tableKey{ModeLegacy, f, "filter"}]
				if kube == nil {
					continue
				}
				if !slices.Equal(kube.chains["FORWARD"], []string{"-j KUBE-FORWARD"}) || !slices.Contains(kube.chains["KUBE-FORWARD"], "-j ACCEPT") {
					t.Errorf("%s: other rules changed: %q", f, kube.chains)
				}
			}
			if diff := diffViews(n.view(ModeNFT), nft); diff != "" {
				t.Errorf("nft state changed:\n%s", diff)
			}
			again, err := Cleanup(context.Background(), n, ModeLegacy)
			if err != nil || again.HasRules() {
				t.Fatalf("second Cleanup: %s, %v", again, err)
			}
			if calls := n.takeCalls(); slices.ContainsFunc(calls, func(c fakeCall) bool { return strings.HasSuffix(c.name, "-restore") }) {
				t.Errorf("Cleanup of a clean mode wrote rules: %v", calls)
			}
		})
	}
}

// TestCleanupRetriesThroughTransientFailures: attempts that fail leave
// leftovers (a commit is all or nothing) and report them; retries of the
// same primitive finish the job.
func TestCleanupRetriesThroughTransientFailures(t *testing.T) {
	n := legacyLeftovers(t)
	n.faults = func(c fakeCall) fault {
		if strings.HasSuffix(c.name, "-restore") {
			return faultBefore
		}
		return faultNone
	}
	l, err := Cleanup(context.Background(), n, ModeLegacy)
	if err == nil || !l.HasRules() {
		t.Fatalf("Cleanup with failing restores: %s, %v; want an error and the rules left", l, err)
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 4 || !strings.Contains(err.Error(), "xtables lock") {
		t.Errorf("error %v should carry the tool's exit code and stderr", err)
	}
	n.faults = randomFaults(3, 0.3)
	retry := func(what string, fn func() error) int {
		for attempts := 1; attempts <= 200; attempts++ {
			if fn() == nil {
				return attempts
			}
		}
		t.Fatalf("%s: no success in 200 attempts", what)
		return 0
	}
	rules := retry("Cleanup", func() error {
		l, err := Cleanup(context.Background(), n, ModeLegacy)
		if err == nil && l.HasRules() {
			return fmt.Errorf("Cleanup succeeded but left %s", l)
		}
		return err
	})
	sets := retry("DestroySets", func() error { return DestroySets(context.Background(), n, ModeLegacy) })
	n.faults = nil
	if l, err := Purge(context.Background(), n, ModeLegacy); err != nil || !l.Empty() {
		t.Fatalf("after the retries: %s, %v", l, err)
	}
	assertNoViolations(t, n)
	t.Logf("rules gone after %d attempts, sets after %d more", rules, sets)
}

func TestDestroySets(t *testing.T) {
	ctx := context.Background()
	n := legacyLeftovers(t)
	err := DestroySets(ctx, n, ModeLegacy)
	if !errors.Is(err, ErrRulesRemain) {
		t.Fatalf("DestroySets with legacy rules left: %v, want ErrRulesRemain", err)
	}
	if _, err := Cleanup(ctx, n, ModeLegacy); err != nil {
		t.Fatal(err)
	}
	// Someone else's rule references one legacy set (ep0's union of
	// identities 300 and 301): it stays, the others go.
	used := unionSetName(ModeLegacy, IPv4, "300,301")
	seedRules(t, n, ModeNFT, IPv4, "*filter\n-A INPUT -m set --match-set "+used+" src -j ACCEPT\nCOMMIT\n")
	err = DestroySets(ctx, n, ModeLegacy)
	if err == nil || !strings.Contains(err.Error(), used) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("DestroySets with a referenced set: %v, want an error naming it", err)
	}
	l, _ := ListLeftovers(ctx, n, ModeLegacy)
	if !slices.Equal(l.Sets, []string{used}) {
		t.Fatalf("left %v, want only the referenced set", l.Sets)
	}
	if v := n.view(ModeNFT); len(v.sets) != 2 {
		t.Fatalf("nft sets %v: DestroySets of legacy must leave them", v.sets)
	}
	n.mu.Lock()
	n.violations = nil // the refusal above was the kernel doing its job
	n.tables[tableKey{ModeNFT, IPv4, "filter"}].chains["INPUT"] = nil
	n.mu.Unlock()
	for range 2 { // idempotent
		if err := DestroySets(ctx, n, ModeLegacy); err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := ListLeftovers(ctx, n, ModeLegacy); !l.Empty() {
		t.Fatalf("left %s", l)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("iptables"); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("ParseMode(iptables) = %v, want ErrUnknownMode", err)
	}
	if got := ModeLegacy.RestoreTool(IPv6); got != "ip6tables-legacy-restore" {
		t.Errorf("RestoreTool = %s", got)
	}
}

// TestPurgeKeepsChainsStillInUse: an agent that moved from the legacy
// iptables dataplane to eBPF still masquerades with legacy's tools; the
// clean-up of legacy removes the policy chains and sets and leaves the
// kept chain and its jump, and ListLeftovers does not count them.
func TestPurgeKeepsChainsStillInUse(t *testing.T) {
	ctx := context.Background()
	n := legacyLeftovers(t)
	masq := "*nat\n:LOCKSTEP-MASQ - [0:0]\n-I POSTROUTING 1 -j LOCKSTEP-MASQ\n-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE\nCOMMIT\n"
	for _, f := range families {
		seedRules(t, n, ModeLegacy, f, masq)
	}
	keep := []ChainRef{{IPv4, "nat", "LOCKSTEP-MASQ"}, {IPv6, "nat", "LOCKSTEP-MASQ"}}
	all, err := ListLeftovers(ctx, n, ModeLegacy)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ListLeftovers(ctx, n, ModeLegacy, keep...)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Chains)-len(kept.Chains) != 2 || len(all.Jumps)-len(kept.Jumps) != 2 {
		t.Fatalf("with keep: %s; without: %s; want the 2 kept chains and their 2 jumps left out", kept, all)
	}
	if l, err := Purge(ctx, n, ModeLegacy, keep...); err != nil || !l.Empty() {
		t.Fatalf("Purge keeping the masquerade chain: %s, %v", l, err)
	}
	for _, f := range families {
		nat := n.tables[tableKey{ModeLegacy, f, "nat"}]
		if len(nat.chains["LOCKSTEP-MASQ"]) != 1 || !slices.Equal(nat.chains["POSTROUTING"], []string{"-j LOCKSTEP-MASQ"}) {
			t.Errorf("%s nat after Purge: %q, want the kept chain and its jump", f, nat.chains)
		}
	}
	if l, err := ListLeftovers(ctx, n, ModeLegacy); err != nil || len(l.Chains) != 2 || len(l.Jumps) != 2 || len(l.Sets) != 0 {
		t.Fatalf("without keep: %s, %v; want only the kept chains and jumps", l, err)
	}
	if l, err := Purge(ctx, n, ModeLegacy); err != nil || !l.Empty() {
		t.Fatalf("Purge without keep: %s, %v", l, err)
	}
	assertNoViolations(t, n)
}

// noIPSet is a node without the ipset tool.
type noIPSet struct{ *fakeNode }

func (n noIPSet) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	if name == ipsetTool {
		return nil, fmt.Errorf("run %s: %w", name, exec.ErrNotFound)
	}
	return n.fakeNode.Run(ctx, name, args, stdin)
}

// TestPurgeWithoutIPSet: a node without ipset (an eBPF node that only
// masquerades) has no lockstep sets; its rules are purged all the same.
func TestPurgeWithoutIPSet(t *testing.T) {
	n := newFakeNode()
	seedRules(t, n, ModeNFT, IPv4, "*nat\n:LOCKSTEP-MASQ - [0:0]\n-I POSTROUTING 1 -j LOCKSTEP-MASQ\nCOMMIT\n")
	if l, err := Purge(context.Background(), noIPSet{n}, ModeNFT); err != nil || !l.Empty() {
		t.Fatalf("Purge: %s, %v", l, err)
	}
	if nat := n.tables[tableKey{ModeNFT, IPv4, "nat"}]; len(nat.chains["POSTROUTING"]) != 0 || nat.chains["LOCKSTEP-MASQ"] != nil {
		t.Fatalf("nat after Purge: %q", nat.chains)
	}
}

func TestParseChain(t *testing.T) {
	dump := `# Generated by iptables-save v1.8.9
*filter
:INPUT ACCEPT [0:0]
:LOCKSTEP-MASQ - [0:0]
-A INPUT -j LOCKSTEP-MASQ
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
:LOCKSTEP-MASQ - [0:0]
-A POSTROUTING -m comment --comment "kube" -j KUBE-POSTROUTING
-A POSTROUTING -m comment --comment "lockstep: masquerade" -j LOCKSTEP-MASQ
-A KUBE-POSTROUTING -g LOCKSTEP-MASQ
-A LOCKSTEP-MASQ -d 10.244.0.0/16 -j RETURN
-A LOCKSTEP-MASQ -s 10.244.1.0/24 -j MASQUERADE
COMMIT
`
	tests := []struct {
		name, table, chain string
		want               Chain
	}{
		{"chain with rules and jumps", "nat", "LOCKSTEP-MASQ", Chain{
			Exists: true,
			Rules:  []string{"-A LOCKSTEP-MASQ -d 10.244.0.0/16 -j RETURN", "-A LOCKSTEP-MASQ -s 10.244.1.0/24 -j MASQUERADE"},
			Jumps:  []string{`-A POSTROUTING -m comment --comment "lockstep: masquerade" -j LOCKSTEP-MASQ`, "-A KUBE-POSTROUTING -g LOCKSTEP-MASQ"},
		}},
		{"same name in another table", "filter", "LOCKSTEP-MASQ", Chain{Exists: true, Jumps: []string{"-A INPUT -j LOCKSTEP-MASQ"}}},
		{"built-in chain", "nat", "PREROUTING", Chain{Exists: true}},
		{"missing chain", "nat", "LOCKSTEP-OTHER", Chain{}},
		{"missing table", "mangle", "LOCKSTEP-MASQ", Chain{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseChain([]byte(dump), tt.table, tt.chain)
			if err != nil {
				t.Fatal(err)
			}
			if got.Exists != tt.want.Exists || !slices.Equal(got.Rules, tt.want.Rules) || !slices.Equal(got.Jumps, tt.want.Jumps) {
				t.Fatalf("ParseChain = %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := ParseChain([]byte("-A X -j Y\n"), "nat", "X"); err == nil {
		t.Error("ParseChain accepted a rule outside a table")
	}
}
