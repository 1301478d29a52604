package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// drain adds a drain mark on cidr.
func (n ipam) drain(cidr v1alpha1.CIDR) ipam {
	n.Spec.Releases = append(n.Spec.Releases, v1alpha1.ReleaseMark{CIDR: cidr, State: v1alpha1.MarkedForRelease, Since: metav1.NewTime(t0), Drain: true})
	return n
}

// TestPlanDrain: an administrator shrank pool v4 from 10.0.0.0/24 to
// 10.0.0.0/25 (or deleted it). Blocks of node a in 10.0.0.128/25 drain:
// marked at once, drain: true, never withdrawn, released as soon as the
// agent is ready, and the node gets new blocks only from what is left.
func TestPlanDrain(t *testing.T) {
	shrunk := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/25")}
	whole := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24")}
	const (
		in  = "10.0.0.0/26"
		in2 = "10.0.0.64/26"
		out = "10.0.0.128/26"
	)
	tests := []struct {
		name   string
		pools  []*v1alpha1.IPPool
		ipams  []ipam
		timers timers
		want   want
	}{{
		name:  "empty block outside the shrunk pool: drained at once, no excess delay",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").block(in, 10).block(out, 0)},
		want:  want{changes: []string{"a drain " + out}},
	}, {
		name:  "busy block outside the shrunk pool: drained at once too",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").block(in, 10).block(out, 7)},
		want:  want{changes: []string{"a drain " + out}},
	}, {
		name:  "a block without a usage report is drained too",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").block(in, -1).block(out, -1)},
		want:  want{changes: []string{"a drain " + out}},
	}, {
		name:  "drained, the agent answered ready for this generation: released at once",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(out, 0).drain(out).answer(out, v1alpha1.ReadyForRelease)},
		want:  want{changes: []string{"a release " + out}},
	}, {
		name:  "drained, the agent answered do-not-release: the mark stays",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(out, 7).drain(out).answer(out, v1alpha1.DoNotRelease)},
		want:  want{},
	}, {
		name:  "drained, a ready answer to an earlier generation: wait",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(4, 3).block(in, 10).block(out, 0).drain(out).answer(out, v1alpha1.ReadyForRelease)},
		want:  want{},
	}, {
		name:  "drained and busy, the node short: a new block from what is left, the mark stays",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 60).block(out, 7).drain(out).answer(out, v1alpha1.DoNotRelease)},
		want:  want{assigns: []string{"a " + in2}},
	}, {
		name:  "the only block is outside: drained, and the node gets one inside",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").block(out, 3)},
		want:  want{changes: []string{"a drain " + out}, assigns: []string{"a " + in}},
	}, {
		name:  "a shrunk pool is never cut outside its ranges",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").block(in, 64).block(in2, 64), nodeIPAM("b")},
		want:  want{notes: []string{"node a needs 16 more", "node b needs 16 more"}},
	}, {
		name:  "pool deleted: its blocks drain, nothing is cut",
		pools: []*v1alpha1.IPPool{pool("v6", 120, "fd00::/112")},
		ipams: []ipam{nodeIPAM("a").block(in, 10).block("fd00::/120", 0)},
		want:  want{changes: []string{"a drain " + in}},
	}, {
		name:  "an excess mark on a block now outside becomes a drain mark, not withdrawn",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(out, 1).
			mark(out, v1alpha1.MarkedForRelease).answer(out, v1alpha1.DoNotRelease)},
		timers: timer("a", out, delay),
		want:   want{changes: []string{"a drain " + out}},
	}, {
		name:  "an excess mark the agent is ready for, block now outside: released without the delay",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(out, 0).
			mark(out, v1alpha1.MarkedForRelease).answer(out, v1alpha1.ReadyForRelease)},
		want: want{changes: []string{"a release " + out}},
	}, {
		name:  "the range is added back: the drain mark stays",
		pools: whole,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(out, 7).drain(out).answer(out, v1alpha1.DoNotRelease)},
		want:  want{},
	}, {
		name:  "a pool whose spec cannot be read drains nothing",
		pools: []*v1alpha1.IPPool{pool("v4", 20, "10.0.0.0/24")}, // blockSize shorter than the range
		ipams: []ipam{nodeIPAM("a").block(in, 10).block(out, 0)},
		want:  want{timers: map[string]string{"a " + out: "0s"}}, // excess, as before
	}, {
		name:   "excess inside a shrunk pool is unchanged: marked after the delay",
		pools:  shrunk,
		ipams:  []ipam{nodeIPAM("a").block(in, 10).block(in2, 0)},
		timers: timer("a", in2, delay),
		want:   want{changes: []string{"a mark " + in2}, timers: map[string]string{"a " + in2: "3m0s"}},
	}, {
		name:  "excess inside a shrunk pool is unchanged: a refusal withdraws",
		pools: shrunk,
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block(in, 10).block(in2, 1).
			mark(in2, v1alpha1.MarkedForRelease).answer(in2, v1alpha1.DoNotRelease)},
		want: want{changes: []string{"a withdraw " + in2}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := &input{pools: tt.pools, now: t0, timers: tt.timers, minFree: 16, delay: delay}
			for _, n := range tt.ipams {
				input.nodeIPAMs = append(input.nodeIPAMs, n.NodeIPAM)
				input.nodes = append(input.nodes, nodes(n.Name)...)
			}
			before := fmt.Sprintf("%+v", input.nodeIPAMs)
			p := planFor(input)
			got := describe(p)
			if tt.want.timers == nil {
				tt.want.timers = map[string]string{}
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"changes", got.changes, tt.want.changes}, {"assigns", got.assigns, tt.want.assigns}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
			if fmt.Sprint(got.timers) != fmt.Sprint(tt.want.timers) {
				t.Errorf("timers = %v, want %v", got.timers, tt.want.timers)
			}
			for _, sub := range tt.want.notes {
				if !slices.ContainsFunc(p.notes, func(n string) bool { return strings.Contains(n, sub) }) {
					t.Errorf("no note contains %q; notes: %q", sub, p.notes)
				}
			}
			if after := fmt.Sprintf("%+v", input.nodeIPAMs); after != before {
				t.Error("planFor modified its input")
			}
			for _, u := range p.updates {
				checkSpecInvariants(t, u.new)
				for _, c := range u.changes {
					if c.action == actionDrain && !u.new.Spec.Draining(c.cidr) {
						t.Errorf("%s: drained without a drain mark: %+v", c.cidr, u.new.Spec.Mark(c.cidr))
					}
				}
			}
		})
	}
}

// TestShrinkDrainsBusyBlock steps one node through a pool shrink with
// the operator's plans and an agent that answers as agent/nodeipam does:
// the block outside holds pods, so the agent refuses; the mark stays
// through the refusal and through the node running short (it gets a new
// block inside instead); once the pods are gone the agent answers ready
// and the block goes at once; once the agent has dropped it, the mark
// goes. No excess delay is waited anywhere.
func TestShrinkDrainsBusyBlock(t *testing.T) {
	const (
		in  = "10.0.0.0/26"
		out = "10.0.0.128/26"
	)
	pools := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/25")}
	n := nodeIPAM("a").gen(2, 2).block(in, 40).block(out, 20).NodeIPAM
	used := map[v1alpha1.CIDR]int32{}
	now := t0
	// agent answers the spec as agent/nodeipam does: usage per block,
	// an answer per mark (ready only for an empty block),
	// observedGeneration current.
	agent := func() {
		n.Status = v1alpha1.NodeIPAMStatus{ObservedGeneration: n.Generation}
		for _, b := range n.Spec.Blocks {
			n.Status.Blocks = append(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: b.CIDR, Allocated: used[b.CIDR]})
		}
		for _, m := range n.Spec.Releases {
			if m.State != v1alpha1.MarkedForRelease {
				continue
			}
			state := v1alpha1.DoNotRelease
			if used[m.CIDR] == 0 {
				state = v1alpha1.ReadyForRelease
			}
			n.Status.Releases = append(n.Status.Releases, v1alpha1.ReleaseAnswer{CIDR: m.CIDR, State: state, Since: metav1.NewTime(now)})
		}
	}
	// step lets the agent answer, plans once and writes the plan as the
	// controller would (each write bumps the generation). It returns the
	// plan's changes and assignments.
	step := func() (changes, assigns []string) {
		t.Helper()
		now = now.Add(time.Second) // far less than the excess delay
		agent()
		p := planFor(&input{pools: pools, nodes: nodes("a"), nodeIPAMs: []*v1alpha1.NodeIPAM{n}, now: now, timers: timers{}, minFree: 16, delay: delay})
		w := describe(p)
		for _, u := range p.updates {
			checkSpecInvariants(t, u.new)
			n = u.new.DeepCopy()
			n.Generation++
		}
		for _, a := range p.assigns {
			n = n.DeepCopy()
			n.Spec.Blocks = append(n.Spec.Blocks, a.block)
			n.Generation++
		}
		return w.changes, w.assigns
	}
	expect := func(what string, changes, assigns, wantChanges, wantAssigns []string) {
		t.Helper()
		if !slices.Equal(changes, wantChanges) || !slices.Equal(assigns, wantAssigns) {
			t.Fatalf("%s: changes %q assigns %q, want %q and %q", what, changes, assigns, wantChanges, wantAssigns)
		}
	}

	used[in], used[out] = 40, 20
	c, a := step()
	expect("after the shrink", c, a, []string{"a drain " + out}, nil)
	if !n.Spec.Draining(out) {
		t.Fatalf("mark on %s: %+v, want a drain mark", out, n.Spec.Mark(out))
	}
	c, a = step()
	expect("the agent refused", c, a, nil, nil)
	if a := n.Status.Answer(out); a == nil || a.State != v1alpha1.DoNotRelease || !n.Spec.Draining(out) {
		t.Fatalf("after the refusal: answer %+v, mark %+v", a, n.Spec.Mark(out))
	}

	// Pods start on the block inside; the drained one does not count.
	used[in] = 60
	c, a = step()
	expect("the node runs short", c, a, nil, []string{"a 10.0.0.64/26"})
	if !n.Spec.Draining(out) {
		t.Fatal("the drain mark was withdrawn when the node ran short")
	}

	// The pods of the drained block are deleted, one at a time.
	used[out] = 1
	c, a = step()
	expect("one pod left in the drained block", c, a, nil, nil)
	used[out] = 0
	c, a = step()
	expect("the last pod is gone and the agent ready", c, a, []string{"a release " + out}, nil)
	if m := n.Spec.Mark(out); n.Spec.Block(out) != nil || m == nil || m.State != v1alpha1.Released {
		t.Fatalf("after the release: blocks %v, mark %+v", n.Spec.Blocks, m)
	}
	c, a = step()
	expect("the agent dropped it", c, a, []string{"a forget " + out}, nil)
	if len(n.Spec.Releases) != 0 || n.Spec.Block(out) != nil {
		t.Fatalf("at the end: %+v", n.Spec)
	}
	if now.Sub(t0) >= delay {
		t.Fatalf("the drain took %s of plan time, the excess delay is %s", now.Sub(t0), delay)
	}
}
