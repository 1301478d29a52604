//go:build linux

package iptables

import (
	"context"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/test/seedtest"
)

// TestPrivilegedSeed000IPSetNeverDestroyedWhileReferenced replays seed 000
// with the real tools of each mode: pod b is the last pod with label pod2;
// while an Apply sits between creating the sets and rewriting the rules,
// b loses the label, a reconcile (Resync) starts, and b gets the label
// back, over several rounds. Every apply succeeds (in NPM the update failed
// with "selector ipset ... does not exist" until restarted), and
// iptables-save and ipset save end exactly in the committed state.
func TestPrivilegedSeed000IPSetNeverDestroyedWhileReferenced(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			r := nsRunner{newNetns(t)}
			st := seedtest.Store(t)
			d, err := New(Options{Mode: m, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			e := enforcer.New(st, d, nil)
			ctx := context.Background()
			if err := e.Sync(ctx); err != nil {
				t.Fatalf("initial apply: %v", err)
			}
			for round := range 5 {
				reconciled := make(chan error, 1)
				var once sync.Once
				d.beforeRules = func() {
					once.Do(func() {
						seedtest.SetPodLabels(t, st, "b", nil) // the last use of pod2 goes
						go func() { reconciled <- e.Resync(ctx) }()
						time.Sleep(30 * time.Millisecond)
						seedtest.SetPodLabels(t, st, "b", map[string]string{"pod2": "yes"})
					})
				}
				extra := map[string]string{"pod2": "yes", "round": string(rune('a' + round))}
				seedtest.SetPodLabels(t, st, "b", extra)
				if err := e.Sync(ctx); err != nil {
					t.Fatalf("round %d: apply interrupted by label churn and reconcile: %v (the seed 000 failure)", round, err)
				}
				if err := <-reconciled; err != nil {
					t.Fatalf("round %d: reconcile: %v", round, err)
				}
				d.beforeRules = nil
				if err := e.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				assertRealView(t, r, m, expectedView(t, m, committed(t, st)))
			}
			if s := d.Stats(); s.Failures != 0 {
				t.Fatalf("stats %+v: applies failed", s)
			}
		})
	}
}
