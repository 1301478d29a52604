//go:build linux

package iptables

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// flakyRunner fails a fraction of the commands it is given before running
// them, as a contended xtables lock does.
type flakyRunner struct {
	r        Runner
	mu       sync.Mutex
	rng      *rand.Rand
	fraction float64
	failed   int
}

func (f *flakyRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	f.mu.Lock()
	fail := f.rng.Float64() < f.fraction
	if fail {
		f.failed++
	}
	f.mu.Unlock()
	if fail {
		return nil, &ExitError{Command: commandLine(name, args), Code: 4, Stderr: "Another app is currently holding the xtables lock (injected)"}
	}
	return f.r.Run(ctx, name, args, stdin)
}

// TestPrivilegedCleanupLegacyAfterTransientFailures replays seed 002 with
// the real tools: lockstep moved from iptables-legacy to iptables-nft. The
// legacy clean-up first stops half-way (jumps deleted, chains left, the
// way a per-command clean-up fails), then runs through a runner failing
// 30% of commands. Failed attempts leave leftovers and say so; retries of
// the same primitives remove every legacy jump, chain and set, using
// legacy tools, and leave kube-proxy's legacy rules and the live nft
// dataplane exactly as they were.
func TestPrivilegedCleanupLegacyAfterTransientFailures(t *testing.T) {
	requireTools(t)
	ctx := context.Background()
	r := nsRunner{newNetns(t)}
	kube := "*filter\n:KUBE-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\n-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n"
	for _, f := range families {
		if _, err := r.Run(ctx, ModeLegacy.RestoreTool(f), restoreArgs, []byte(kube)); err != nil {
			t.Fatal(err)
		}
	}
	old, now := manyEndpoints(10, 0), twoPods(301)
	legacy, err := New(Options{Mode: ModeLegacy, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	attachAll(t, legacy, old)
	mustApply(t, legacy, old)
	nft, err := New(Options{Mode: ModeNFT, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	attachAll(t, nft, now)
	mustApply(t, nft, now)
	nftBefore := realView(t, r, ModeNFT)

	// A clean-up that stopped half-way: the jumps are gone, the chains
	// (with their rules) are not.
	for _, f := range families {
		payload := "*filter\n"
		for _, h := range hooks {
			payload += "-D " + h.builtin + " -m comment --comment \"" + jumpComment + "\" -j " + h.chain + "\n"
		}
		if _, err := r.Run(ctx, ModeLegacy.RestoreTool(f), restoreArgs, []byte(payload+"COMMIT\n")); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ListLeftovers(ctx, r, ModeLegacy)
	if err != nil || len(l.Jumps) != 0 || len(l.Chains) == 0 || len(l.Sets) == 0 {
		t.Fatalf("half-done state: %s, %v; want chains and sets, no jumps", l, err)
	}

	// Every restore fails: the attempt reports the failure, and what is left.
	alwaysFails := &flakyRunner{r: r, rng: rand.New(rand.NewPCG(1, 1)), fraction: 1}
	if _, err := Cleanup(ctx, alwaysFails, ModeLegacy); err == nil || !strings.Contains(err.Error(), "xtables lock") {
		t.Fatalf("Cleanup through a failing runner: %v, want the lock error", err)
	}
	if l, err := ListLeftovers(ctx, r, ModeLegacy); err != nil || !l.HasRules() {
		t.Fatalf("after a failed attempt: %s, %v; want the rules still there", l, err)
	}

	// Retries through a runner that fails 30% of commands.
	flaky := &flakyRunner{r: r, rng: rand.New(rand.NewPCG(2, 2)), fraction: 0.3}
	retry := func(what string, fn func() error) int {
		for attempts := 1; attempts <= 100; attempts++ {
			if fn() == nil {
				return attempts
			}
		}
		t.Fatalf("%s: no success in 100 attempts", what)
		return 0
	}
	rules := retry("Cleanup", func() error {
		l, err := Cleanup(ctx, flaky, ModeLegacy)
		if err == nil && l.HasRules() {
			return fmt.Errorf("Cleanup succeeded but left %s", l)
		}
		return err
	})
	sets := retry("DestroySets", func() error { return DestroySets(ctx, flaky, ModeLegacy) })
	t.Logf("legacy rules gone after %d attempts, sets after %d more (%d commands failed)", rules, sets, flaky.failed)
	if l, err := ListLeftovers(ctx, r, ModeLegacy); err != nil || !l.Empty() {
		t.Fatalf("after the retries: %s, %v", l, err)
	}
	for _, f := range families {
		out, err := r.Run(ctx, ModeLegacy.SaveTool(f), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-A FORWARD -j KUBE-FORWARD", "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"} {
			if !strings.Contains(string(out), want+"\n") {
				t.Errorf("%s: kube-proxy's legacy rule %q is gone:\n%s", f, want, out)
			}
		}
	}
	assertRealView(t, r, ModeNFT, nftBefore)
	if _, err := Purge(ctx, r, ModeNFT); err != nil {
		t.Fatal(err)
	}
	assertClean(t, r)
}

// TestPrivilegedCleanupIsAtomicPerFamily: a Cleanup whose IPv6 commit
// fails leaves IPv6 whole and IPv4 clean; the next one finishes.
func TestPrivilegedCleanupIsAtomicPerFamily(t *testing.T) {
	requireTools(t)
	ctx := context.Background()
	r := nsRunner{newNetns(t)}
	d, err := New(Options{Mode: ModeLegacy, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	want := manyEndpoints(4, 0)
	attachAll(t, d, want)
	mustApply(t, d, want)
	before := realView(t, r, ModeLegacy)
	failV6 := runnerFunc(func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		if name == ModeLegacy.RestoreTool(IPv6) {
			return nil, fmt.Errorf("injected failure of %s", name)
		}
		return r.Run(ctx, name, args, stdin)
	})
	l, err := Cleanup(ctx, failV6, ModeLegacy)
	if err == nil {
		t.Fatal("Cleanup succeeded with the IPv6 commit failing")
	}
	for _, c := range l.Chains {
		if c.Family != IPv6 {
			t.Errorf("IPv4 chain %s left", c.Chain)
		}
	}
	after := realView(t, r, ModeLegacy)
	if diff := diffViews(lockstepView{chains: [2]map[string][]string{nil, after.chains[1]}, jumps: [2][]string{nil, after.jumps[1]}},
		lockstepView{chains: [2]map[string][]string{nil, before.chains[1]}, jumps: [2][]string{nil, before.jumps[1]}}); diff != "" {
		t.Errorf("IPv6 changed by a failed commit:\n%s", diff)
	}
	if _, err := Purge(ctx, r, ModeLegacy); err != nil {
		t.Fatal(err)
	}
	assertClean(t, r)
}

type runnerFunc func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error)

func (f runnerFunc) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	return f(ctx, name, args, stdin)
}
