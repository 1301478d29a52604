package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const delay = 180 * time.Second

func pool(name string, size int32, cidrs ...v1alpha1.CIDR) *v1alpha1.IPPool {
	return &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       v1alpha1.IPPoolSpec{CIDRs: cidrs, BlockSize: size},
	}
}

// ipam is a NodeIPAM under construction for a test: node name, object
// UID "ipam-<name>", owner Node UID "uid-<name>", generation 2 and a status
// current at generation 2, unless changed.
type ipam struct{ *v1alpha1.NodeIPAM }

func nodeIPAM(name string) ipam {
	n := v1alpha1.NewNodeIPAM(name, types.UID("uid-"+name))
	n.UID = types.UID("ipam-" + name)
	n.Generation = 2
	n.Status.ObservedGeneration = 2
	return ipam{n}
}

func (n ipam) owner(uid types.UID) ipam {
	n.OwnerReferences[0].UID = uid
	return n
}

func (n ipam) gen(gen, observed int64) ipam {
	n.Generation, n.Status.ObservedGeneration = gen, observed
	return n
}

// block adds a block of pool "v4" the agent reports used addresses of;
// used < 0 means no report.
func (n ipam) block(cidr v1alpha1.CIDR, used int32) ipam {
	pool := "v4"
	if strings.Contains(string(cidr), ":") {
		pool = "v6"
	}
	n.Spec.Blocks = append(n.Spec.Blocks, v1alpha1.Block{CIDR: cidr, Pool: pool})
	if used >= 0 {
		n.Status.Blocks = append(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: cidr, Allocated: used})
	}
	return n
}

func (n ipam) mark(cidr v1alpha1.CIDR, s v1alpha1.ReleaseState) ipam {
	n.Spec.Releases = append(n.Spec.Releases, v1alpha1.ReleaseMark{CIDR: cidr, State: s, Since: metav1.NewTime(t0)})
	return n
}

func (n ipam) answer(cidr v1alpha1.CIDR, s v1alpha1.ReleaseState) ipam {
	n.Status.Releases = append(n.Status.Releases, v1alpha1.ReleaseAnswer{CIDR: cidr, State: s, Since: metav1.NewTime(t0)})
	return n
}

func (n ipam) deleting() ipam {
	ts := metav1.NewTime(t0)
	n.DeletionTimestamp = &ts
	return n
}

func nodes(names ...string) []node {
	var out []node
	for _, name := range names {
		out = append(out, node{name: name, uid: types.UID("uid-" + name)})
	}
	return out
}

// timer is a running timer of node name's block, started ago before t0.
func timer(name string, cidr v1alpha1.CIDR, ago time.Duration) timers {
	return timers{{types.UID("ipam-" + name), cidr}: t0.Add(-ago)}
}

// want is a plan in words, so a table row reads as the scenario.
type want struct {
	creates  []string          // node names
	deletes  []string          // NodeIPAM names
	assigns  []string          // "node cidr"
	changes  []string          // "node action cidr"
	timers   map[string]string // "node cidr" -> age at t0, e.g. "3m0s"
	notes    []string          // substrings of some note
	reserved []string          // node names
}

func describe(p plan) want {
	var w want
	for _, n := range p.creates {
		w.creates = append(w.creates, n.Name)
	}
	for _, d := range p.deletes {
		w.deletes = append(w.deletes, d.name)
	}
	for _, a := range p.assigns {
		w.assigns = append(w.assigns, a.nodeIPAM+" "+string(a.block.CIDR))
	}
	for _, u := range p.updates {
		for _, c := range u.changes {
			w.changes = append(w.changes, fmt.Sprintf("%s %s %s", u.new.Name, c.action, c.cidr))
		}
	}
	for name := range p.reserved {
		w.reserved = append(w.reserved, name)
	}
	slices.Sort(w.reserved)
	w.timers = map[string]string{}
	for k, since := range p.timers {
		w.timers[strings.TrimPrefix(string(k.uid), "ipam-")+" "+string(k.cidr)] = t0.Sub(since).String()
	}
	return w
}

func TestPlan(t *testing.T) {
	v4 := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24")}
	reservedA := map[string]reservation{"a": {nodeUID: "uid-a", blocks: []v1alpha1.CIDR{"10.0.0.0/26"}}}
	tests := []struct {
		name     string
		pools    []*v1alpha1.IPPool
		nodes    []node
		ipams    []ipam
		timers   timers
		reserved map[string]reservation
		minFree  int64
		want     want
	}{{
		name:  "a new node gets an empty NodeIPAM first",
		pools: v4, nodes: nodes("a"),
		want: want{creates: []string{"a"}},
	}, {
		name:  "an empty NodeIPAM gets one block",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a")},
		want:  want{assigns: []string{"a 10.0.0.0/26"}},
	}, {
		name:  "min-free zero still gives one block",
		pools: v4, nodes: nodes("a"), minFree: -1,
		ipams: []ipam{nodeIPAM("a")},
		want:  want{assigns: []string{"a 10.0.0.0/26"}},
	}, {
		name:  "dual stack: one block of each family",
		pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24"), pool("v6", 120, "fd00::/112")},
		nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a")},
		want:  want{assigns: []string{"a 10.0.0.0/26", "a fd00::/120"}},
	}, {
		name:  "demand grows: fewer than min-free left, one more block",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 50)},
		want:  want{assigns: []string{"a 10.0.0.64/26"}},
	}, {
		name:  "blocks of other nodes are never cut again",
		pools: v4, nodes: nodes("a", "b", "c"),
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 60), nodeIPAM("b").block("10.0.0.64/26", 0), nodeIPAM("c")},
		want:  want{assigns: []string{"a 10.0.0.128/26", "c 10.0.0.192/26"}},
	}, {
		name:  "exhausted pool: nothing to cut, said so",
		pools: v4, nodes: nodes("a", "e"),
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 64).block("10.0.0.64/26", 64).block("10.0.0.128/26", 64).block("10.0.0.192/26", 64), nodeIPAM("e")},
		want:  want{notes: []string{"node a needs 16 more", "node e needs 16 more"}},
	}, {
		name:  "overlapping pools hand out nothing",
		pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24"), pool("w", 26, "10.0.0.0/25")},
		nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a")},
		want:  want{},
	}, {
		name:  "no usage report: never excess",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", -1).block("10.0.0.64/26", -1)},
		want:  want{},
	}, {
		name:  "excess block: the timer starts, nothing is marked yet",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").block("10.0.0.0/26", 10).block("10.0.0.64/26", 0)},
		want:  want{timers: map[string]string{"a 10.0.0.64/26": "0s"}},
	}, {
		name:  "excess for less than the delay: no mark",
		pools: v4, nodes: nodes("a"),
		ipams:  []ipam{nodeIPAM("a").block("10.0.0.0/26", 10).block("10.0.0.64/26", 0)},
		timers: timer("a", "10.0.0.64/26", delay-time.Second),
		want:   want{timers: map[string]string{"a 10.0.0.64/26": "2m59s"}},
	}, {
		name:  "excess for the whole delay: marked",
		pools: v4, nodes: nodes("a"),
		ipams:  []ipam{nodeIPAM("a").block("10.0.0.0/26", 10).block("10.0.0.64/26", 0)},
		timers: timer("a", "10.0.0.64/26", delay),
		want:   want{changes: []string{"a mark 10.0.0.64/26"}, timers: map[string]string{"a 10.0.0.64/26": "3m0s"}},
	}, {
		name:  "the only block is never excess",
		pools: v4, nodes: nodes("a"),
		ipams:  []ipam{nodeIPAM("a").block("10.0.0.0/26", 0)},
		timers: timer("a", "10.0.0.0/26", time.Hour),
		want:   want{},
	}, {
		name:  "two empty blocks, one excess: the higher goes",
		pools: v4, nodes: nodes("a"),
		ipams:  []ipam{nodeIPAM("a").block("10.0.0.0/26", 0).block("10.0.0.64/26", 0)},
		timers: timer("a", "10.0.0.64/26", delay),
		want:   want{changes: []string{"a mark 10.0.0.64/26"}, timers: map[string]string{"a 10.0.0.64/26": "3m0s"}},
	}, {
		name:  "marked, the agent has not answered: wait",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 2).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease)},
		timers: timer("a", "10.0.0.64/26", delay+time.Minute),
		want:   want{timers: map[string]string{"a 10.0.0.64/26": "4m0s"}},
	}, {
		name:  "marked, a ready answer to an earlier generation: wait",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(5, 4).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.ReadyForRelease)},
		timers: timer("a", "10.0.0.64/26", delay+time.Minute),
		want:   want{timers: map[string]string{"a 10.0.0.64/26": "4m0s"}},
	}, {
		name:  "marked, ready for this generation, timer matured: released",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.ReadyForRelease)},
		timers: timer("a", "10.0.0.64/26", delay),
		want:   want{changes: []string{"a release 10.0.0.64/26"}},
	}, {
		// Seed 004, operator half: the operator restarted after marking.
		// The mark and a current ready answer are there, but its timers
		// are gone: it starts them again and waits the whole delay.
		name:  "restarted mid-handshake: the timer starts again, no release",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.ReadyForRelease)},
		want: want{timers: map[string]string{"a 10.0.0.64/26": "0s"}, notes: []string{"release timer restarted"}},
	}, {
		name:  "marked, the agent refuses: withdrawn at once",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block("10.0.0.0/26", 10).block("10.0.0.64/26", 1).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.DoNotRelease)},
		want: want{changes: []string{"a withdraw 10.0.0.64/26"}},
	}, {
		name:  "marked, a refusal of an earlier generation: wait for a current answer",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(5, 4).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.DoNotRelease)},
		timers: timer("a", "10.0.0.64/26", delay),
		want:   want{timers: map[string]string{"a 10.0.0.64/26": "3m0s"}},
	}, {
		name:  "an agent that never answers keeps its block",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 2).block("10.0.0.0/26", 10).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease)},
		timers: timer("a", "10.0.0.64/26", 24*time.Hour),
		want:   want{timers: map[string]string{"a 10.0.0.64/26": "24h0m0s"}},
	}, {
		name:  "marked, but the node needs it again: withdrawn, no new block",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(3, 3).block("10.0.0.0/26", 60).block("10.0.0.64/26", 0).
			mark("10.0.0.64/26", v1alpha1.MarkedForRelease).answer("10.0.0.64/26", v1alpha1.ReadyForRelease)},
		timers: timer("a", "10.0.0.64/26", delay),
		want:   want{changes: []string{"a withdraw 10.0.0.64/26"}},
	}, {
		name:  "released, the agent has caught up: the mark goes",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").gen(4, 4).block("10.0.0.0/26", 10).mark("10.0.0.64/26", v1alpha1.Released)},
		want:  want{changes: []string{"a forget 10.0.0.64/26"}},
	}, {
		name:  "released, the agent still lists it: the mark stays and the block is not cut again",
		pools: v4, nodes: nodes("a", "b"),
		ipams: []ipam{
			nodeIPAM("a").gen(4, 4).block("10.0.0.0/26", 10).mark("10.0.0.64/26", v1alpha1.Released).answer("10.0.0.64/26", v1alpha1.ReadyForRelease),
			nodeIPAM("b"),
		},
		want: want{assigns: []string{"b 10.0.0.128/26"}},
	}, {
		name:  "a block the agent still reports outside spec.blocks is not cut again",
		pools: v4, nodes: nodes("a", "b"),
		ipams: []ipam{
			func() ipam {
				n := nodeIPAM("a").block("10.0.0.0/26", 10)
				n.Status.Blocks = append(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: "10.0.0.64/26", Allocated: 2})
				return n
			}(),
			nodeIPAM("b"),
		},
		want: want{assigns: []string{"b 10.0.0.128/26"}},
	}, {
		// Seed 003, operator half: node a was deleted and re-created; its
		// old NodeIPAM still exists. It is deleted, not reused, and its
		// block is not cut for anyone while it exists.
		name:  "node re-created: the stale NodeIPAM is deleted and its block stays held",
		pools: v4, nodes: nodes("a", "b"),
		ipams: []ipam{nodeIPAM("a").owner("uid-a-old").block("10.0.0.0/26", 3), nodeIPAM("b")},
		want:  want{deletes: []string{"a"}, assigns: []string{"b 10.0.0.64/26"}},
	}, {
		// After the stale object is gone, the new node's agent may still
		// hold addresses in its blocks, and says so only once the
		// replacement exists and it has reported on it.
		name:  "deleted stale NodeIPAM: its blocks stay reserved until the replacement's agent reports",
		pools: v4, nodes: nodes("a", "b"), reserved: reservedA,
		ipams: []ipam{nodeIPAM("a").gen(1, 0), nodeIPAM("b")},
		want:  want{assigns: []string{"a 10.0.0.64/26", "b 10.0.0.128/26"}, reserved: []string{"a"}},
	}, {
		name:  "the replacement's agent has reported: the reservation ends",
		pools: v4, nodes: nodes("a", "b"), reserved: reservedA,
		ipams: []ipam{nodeIPAM("a").gen(1, 1), nodeIPAM("b")},
		want:  want{assigns: []string{"a 10.0.0.0/26", "b 10.0.0.64/26"}},
	}, {
		name:  "stale NodeIPAM already being deleted: wait",
		pools: v4, nodes: nodes("a"),
		ipams: []ipam{nodeIPAM("a").owner("uid-a-old").block("10.0.0.0/26", 3).deleting()},
		want:  want{},
	}, {
		name:  "orphaned NodeIPAM: left to the garbage collector, its block held",
		pools: v4, nodes: nodes("b"),
		ipams: []ipam{nodeIPAM("gone").block("10.0.0.0/26", 3), nodeIPAM("b")},
		want:  want{assigns: []string{"b 10.0.0.64/26"}, notes: []string{"nodeipam gone has no Node"}},
	}, {
		name:  "a Node being deleted gets no block",
		pools: v4, nodes: []node{{name: "a", uid: "uid-a", deleting: true}},
		ipams: []ipam{nodeIPAM("a")},
		want:  want{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &input{pools: tt.pools, nodes: tt.nodes, now: t0, timers: tt.timers, reserved: tt.reserved, minFree: 16, delay: delay}
			if tt.minFree < 0 {
				in.minFree = 0
			}
			for _, n := range tt.ipams {
				in.nodeIPAMs = append(in.nodeIPAMs, n.NodeIPAM)
			}
			before := fmt.Sprintf("%+v", in.nodeIPAMs)
			p := planFor(in)
			got := describe(p)
			if tt.want.timers == nil {
				tt.want.timers = map[string]string{}
			}
			check := func(what string, got, want []string) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", what, got, want)
				}
			}
			check("creates", got.creates, tt.want.creates)
			check("deletes", got.deletes, tt.want.deletes)
			check("assigns", got.assigns, tt.want.assigns)
			check("changes", got.changes, tt.want.changes)
			check("reserved", got.reserved, tt.want.reserved)
			if fmt.Sprint(got.timers) != fmt.Sprint(tt.want.timers) {
				t.Errorf("timers = %v, want %v", got.timers, tt.want.timers)
			}
			for _, sub := range tt.want.notes {
				if !slices.ContainsFunc(p.notes, func(n string) bool { return strings.Contains(n, sub) }) {
					t.Errorf("no note contains %q; notes: %q", sub, p.notes)
				}
			}
			if after := fmt.Sprintf("%+v", in.nodeIPAMs); after != before {
				t.Error("planFor modified its input")
			}
			for _, u := range p.updates {
				checkSpecInvariants(t, u.new)
			}
		})
	}
}

// checkSpecInvariants checks what the API server's CEL rules check: a
// marked block is still assigned, a released one is not.
func checkSpecInvariants(t *testing.T, n *v1alpha1.NodeIPAM) {
	t.Helper()
	for _, m := range n.Spec.Releases {
		assigned := n.Spec.Block(m.CIDR) != nil
		if m.State == v1alpha1.MarkedForRelease && !assigned {
			t.Errorf("nodeipam %s: %s is marked for release but not assigned", n.Name, m.CIDR)
		}
		if m.State == v1alpha1.Released && assigned {
			t.Errorf("nodeipam %s: %s is released but still assigned", n.Name, m.CIDR)
		}
	}
}

// TestReleaseWaitsForAnswerAfterRestart steps one block through the
// handshake with the clock, across an operator restart: the restarted
// operator releases only once its own timer has run the whole delay and
// the agent's answer is current.
func TestReleaseWaitsForAnswerAfterRestart(t *testing.T) {
	pools := []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/24")}
	const b = v1alpha1.CIDR("10.0.0.64/26")
	n := nodeIPAM("a").gen(3, 3).block("10.0.0.0/26", 10).block(b, 0).
		mark(b, v1alpha1.MarkedForRelease).answer(b, v1alpha1.ReadyForRelease).NodeIPAM
	ts := timers{} // a fresh process
	step := func(at time.Duration) plan {
		p := planFor(&input{pools: pools, nodes: nodes("a"), nodeIPAMs: []*v1alpha1.NodeIPAM{n}, now: t0.Add(at), timers: ts, minFree: 16, delay: delay})
		ts = p.timers
		return p
	}
	for _, at := range []time.Duration{0, time.Second, delay / 2, delay - time.Second} {
		if p := step(at); len(p.updates) != 0 {
			t.Fatalf("at +%s after restart: %v, want no write before the delay", at, describe(p).changes)
		}
	}
	p := step(delay)
	if got := describe(p).changes; !slices.Equal(got, []string{"a release " + string(b)}) {
		t.Fatalf("at +%s: changes %q, want the release", delay, got)
	}
	if n.Spec.Block(b) == nil {
		t.Fatal("planFor modified its input")
	}
	released := p.updates[0].new
	if released.Spec.Block(b) != nil || released.Spec.Mark(b).State != v1alpha1.Released {
		t.Errorf("released spec: blocks %v, mark %v", released.Spec.Blocks, released.Spec.Mark(b))
	}
}

func TestPoolStatus(t *testing.T) {
	in := &input{
		pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/25"), pool("bad", 26, "10.0.0.0/24")},
		nodes: nodes("a", "b"),
		nodeIPAMs: []*v1alpha1.NodeIPAM{
			nodeIPAM("a").block("10.0.0.0/26", 10).NodeIPAM,
			nodeIPAM("b").block("10.0.0.64/26", 63).NodeIPAM,
		},
		now: t0, minFree: 16, delay: delay,
	}
	p := planFor(in)
	got := map[string]*v1alpha1.IPPool{}
	for _, pool := range p.poolStatus {
		got[pool.Name] = pool
	}
	for _, tt := range []struct {
		pool      string
		allocated int32
		ready     metav1.ConditionStatus
		exhausted metav1.ConditionStatus
	}{
		{"v4", 2, metav1.ConditionFalse, metav1.ConditionUnknown}, // overlaps "bad"
		{"bad", 0, metav1.ConditionFalse, metav1.ConditionUnknown},
	} {
		pool := got[tt.pool]
		if pool == nil {
			t.Fatalf("no status for pool %s", tt.pool)
		}
		if pool.Status.AllocatedBlocks != tt.allocated {
			t.Errorf("pool %s: allocatedBlocks %d, want %d", tt.pool, pool.Status.AllocatedBlocks, tt.allocated)
		}
		if c := metav1.FindStatusCondition(pool.Status.Conditions, v1alpha1.IPPoolReady); c == nil || c.Status != tt.ready {
			t.Errorf("pool %s: Ready %v, want %s", tt.pool, c, tt.ready)
		}
		if c := metav1.FindStatusCondition(pool.Status.Conditions, v1alpha1.IPPoolExhausted); c == nil || c.Status != tt.exhausted {
			t.Errorf("pool %s: Exhausted %v, want %s", tt.pool, c, tt.exhausted)
		}
	}

	// Alone, the pool is Ready and, with node b short, exhausted.
	in.pools = in.pools[:1]
	p = planFor(in)
	if len(p.poolStatus) != 1 {
		t.Fatalf("%d pool statuses, want 1", len(p.poolStatus))
	}
	st := p.poolStatus[0].Status
	if c := metav1.FindStatusCondition(st.Conditions, v1alpha1.IPPoolExhausted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Exhausted = %v, want True", c)
	}
	// Writing the status back makes the next plan write nothing.
	in.pools = []*v1alpha1.IPPool{p.poolStatus[0]}
	if p := planFor(in); len(p.poolStatus) != 0 {
		t.Errorf("an unchanged pool status is written again: %+v", p.poolStatus[0].Status)
	}
}
