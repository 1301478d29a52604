//go:build linux

package iptables

import (
	"context"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/test/testenv"
)

func reportSize(b *testing.B, d *Dataplane) {
	s := d.Stats()
	b.ReportMetric(float64(s.Rules), "rules")
	b.ReportMetric(float64(s.Sets), "sets")
	b.ReportMetric(float64(s.SetEntries), "entries")
}

// BenchmarkPrivilegedApplyFromScratch measures one Apply of benchState on a
// namespace with no lockstep state: reading the (empty) state, creating
// every set, writing every chain.
func BenchmarkPrivilegedApplyFromScratch(b *testing.B) {
	testenv.Privileged(b)
	requireTools(b)
	want := benchState(-1, 0)
	for _, m := range bothModes {
		b.Run("mode="+m.short(), func(b *testing.B) {
			r := nsRunner{newNetns(b)}
			var d *Dataplane
			for b.Loop() {
				b.StopTimer()
				if _, err := Purge(context.Background(), r, m); err != nil {
					b.Fatal(err)
				}
				var err error
				if d, err = New(Options{Mode: m, Runner: r}); err != nil {
					b.Fatal(err)
				}
				attachAll(b, d, want)
				b.StartTimer()
				mustApply(b, d, want)
			}
			reportSize(b, d)
		})
	}
}

// BenchmarkPrivilegedApplyOneChange measures one Apply with benchState loaded
// (~50.6k rules): a port range of one endpoint's rule changes back and
// forth (each state compiled afresh, so every endpoint is compared), or
// one endpoint comes and goes (a pod ADD or DEL).
func BenchmarkPrivilegedApplyOneChange(b *testing.B) {
	testenv.Privileged(b)
	requireTools(b)
	withRule := [2]*policy.Desired{benchState(7, 0), benchState(7, 3)}
	fewer := benchState(-1, 0)
	delete(fewer.Endpoints, "lxc639")
	withEndpoint := [2]*policy.Desired{benchState(-1, 0), fewer}
	for _, m := range bothModes {
		for _, c := range []struct {
			name   string
			states [2]*policy.Desired
		}{{"rule", withRule}, {"endpoint", withEndpoint}} {
			b.Run("mode="+m.short()+"/change="+c.name, func(b *testing.B) {
				r := nsRunner{newNetns(b)}
				d, err := New(Options{Mode: m, Runner: r})
				if err != nil {
					b.Fatal(err)
				}
				attachAll(b, d, c.states[0])
				mustApply(b, d, c.states[0])
				mustApply(b, d, c.states[1])
				i := 0
				for b.Loop() {
					mustApply(b, d, c.states[i%2])
					i++
				}
				reportSize(b, d)
			})
		}
	}
}
