package operator

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// timerKey names one release timer: a block of one NodeIPAM object. The
// object's UID, not its name, so a NodeIPAM re-created for a replaced Node
// starts with no timers.
type timerKey struct {
	uid  types.UID
	cidr v1alpha1.CIDR
}

// timers holds, for each block this replica has seen excess (or marked for
// release) continuously, when that started. They live only in memory: an
// operator that restarts, or a replica that takes over, starts every timer
// again, so it can release later than a deadline would have said but never
// earlier.
type timers map[timerKey]time.Time

// action is what the operator does to one block of a node's spec.
type action string

const (
	actionMark     action = "mark"     // add a marked-for-release mark: an excess block
	actionDrain    action = "drain"    // add a drain mark, or make a mark one: a block outside its pool
	actionWithdraw action = "withdraw" // delete a marked-for-release mark
	actionRelease  action = "release"  // take the block back: out of spec.blocks, mark released
	actionForget   action = "forget"   // delete a released mark the agent has caught up with
	actionWait     action = "wait"     // nothing written: a timer (re)started
)

// change is one decision about one block, and why; the controller logs it.
// drain is set on the release of a drained block.
type change struct {
	cidr   v1alpha1.CIDR
	action action
	why    string
	drain  bool
}

// nodeDecision is what decideNode wants done to one current NodeIPAM.
type nodeDecision struct {
	// spec is the new spec, nil when nothing changes.
	spec    *v1alpha1.NodeIPAMSpec
	changes []change
	// notes are decisions that write nothing (timers restarted).
	notes []change
	// short is, per address family, how many more free addresses the
	// node needs than its blocks (withdrawn marks included) give it.
	short map[family]int64
	// timers are the node's running timers after this decision.
	timers map[v1alpha1.CIDR]time.Time
	// wake is the earliest time a timer of the node matures; zero if none.
	wake time.Time
}

// block is one of a node's blocks as decideNode sees it.
type block struct {
	cidr     v1alpha1.CIDR
	prefix   netip.Prefix
	family   family
	capacity int64
	used     int64 // from the agent's usage report; 0 when not reported
	reported bool
	// outside says why the block drains: it is not inside its pool's
	// ranges. Empty for a block inside, even one under a drain mark.
	outside string
}

func (b block) free() int64 { return b.capacity - min(b.used, b.capacity) }

// decideNode runs the release handshake and the free-address target for
// one NodeIPAM that belongs to its current Node. families are the address
// families some Ready pool can give blocks of; pools are the pools parsed,
// by name. It is pure: everything it knows is in its arguments.
//
// Blocks outside their pool come first and apart (drain.go): they are
// marked at once, never withdrawn, and count as no free address. For the
// others the order of the steps is the order of precedence: an agent's
// refusal first, then the node's own need (a mark is withdrawn before a
// new block is cut), then releases, then new marks.
func decideNode(n *v1alpha1.NodeIPAM, families []family, pools map[string]*poolInfo, in *input) nodeDecision {
	d := nodeDecision{short: map[family]int64{}, timers: map[v1alpha1.CIDR]time.Time{}}
	spec := n.Spec.DeepCopy()
	changed := false
	need := max(in.minFree, 1)
	current := n.StatusCurrent()
	usage := map[v1alpha1.CIDR]int64{}
	for _, u := range n.Status.Blocks {
		usage[u.CIDR] = int64(u.Allocated)
	}
	answer := func(cidr v1alpha1.CIDR) v1alpha1.ReleaseState {
		if a := n.Status.Answer(cidr); current && a != nil {
			return a.State
		}
		return ""
	}
	note := func(list *[]change, cidr v1alpha1.CIDR, a action, format string, args ...any) {
		*list = append(*list, change{cidr: cidr, action: a, why: fmt.Sprintf(format, args...)})
	}

	// Handshake step 5: a released mark goes once the agent's status has
	// caught up with it and no longer mentions the block.
	kept := spec.Releases[:0]
	for _, m := range spec.Releases {
		_, reported := usage[m.CIDR]
		if m.State == v1alpha1.Released && current && n.Status.Answer(m.CIDR) == nil && !reported {
			note(&d.changes, m.CIDR, actionForget, "the agent has dropped the released block")
			changed = true
			continue
		}
		kept = append(kept, m)
	}
	spec.Releases = kept

	// Free addresses per family count only blocks the agent may allocate
	// from: a marked or draining block is not one.
	free := map[family]int64{}
	var marked, unmarked, draining []block
	for _, b := range spec.Blocks {
		p, err := b.CIDR.Prefix()
		if err != nil {
			continue // the API server refuses such a CIDR; touch nothing
		}
		used, reported := usage[b.CIDR]
		x := block{cidr: b.CIDR, prefix: p, family: familyOf(p), capacity: capacity(p), used: used, reported: reported}
		x.outside = outsideOf(b, p, pools)
		if x.outside != "" || spec.Draining(b.CIDR) {
			draining = append(draining, x)
			continue
		}
		if m := spec.Mark(b.CIDR); m != nil && m.State == v1alpha1.MarkedForRelease {
			marked = append(marked, x)
			continue
		}
		unmarked = append(unmarked, x)
		free[x.family] += x.free()
	}
	// Highest addresses first, for withdrawing, releasing and marking
	// alike: any fixed order would do, this one keeps the low blocks.
	byAddrDesc := func(a, b block) int { return b.prefix.Addr().Compare(a.prefix.Addr()) }
	slices.SortFunc(marked, byAddrDesc)
	slices.SortFunc(unmarked, byAddrDesc)

	withdraw := func(x block, format string, args ...any) {
		spec.Releases = slices.DeleteFunc(spec.Releases, func(m v1alpha1.ReleaseMark) bool { return m.CIDR == x.cidr })
		free[x.family] += x.free()
		changed = true
		note(&d.changes, x.cidr, actionWithdraw, format, args...)
	}
	// release takes x back: out of spec.blocks, its mark released.
	release := func(x block) {
		spec.Blocks = slices.DeleteFunc(spec.Blocks, func(b v1alpha1.Block) bool { return b.CIDR == x.cidr })
		for i := range spec.Releases {
			if spec.Releases[i].CIDR == x.cidr {
				spec.Releases[i].State = v1alpha1.Released
				spec.Releases[i].Since = metav1.NewTime(in.now)
			}
		}
		changed = true
	}

	drained, held := drainBlocks(n, spec, draining, in, release)
	if len(drained) > 0 {
		d.changes = append(d.changes, drained...)
		changed = true
	}
	d.notes = append(d.notes, held...)

	// An agent that refuses is answered at once, timer or not.
	var waiting []block
	for _, x := range marked {
		if answer(x.cidr) == v1alpha1.DoNotRelease {
			withdraw(x, "the agent answered do-not-release for generation %d: the block holds pods", n.Generation)
			continue
		}
		waiting = append(waiting, x)
	}
	for _, x := range waiting {
		if free[x.family] < need {
			withdraw(x, "the node needs it again: %d free %s addresses without it, want %d", free[x.family], x.family, need)
			continue
		}
		since, ok := in.timers[timerKey{n.UID, x.cidr}]
		if !ok {
			since = in.now
			note(&d.notes, x.cidr, actionWait, "marked for release before this replica led; release timer restarted, %s to go", in.delay)
		}
		if in.now.Sub(since) >= in.delay && n.MayRelease(x.cidr) {
			if why := in.pods.holdsRelease(x.prefix); why != "" {
				note(&d.notes, x.cidr, actionWait, "%s", why)
				d.timers[x.cidr] = since
				continue
			}
			release(x)
			note(&d.changes, x.cidr, actionRelease, "the agent answered ready-for-release for generation %d and the block has been excess for %s",
				n.Generation, in.now.Sub(since).Round(time.Second))
			continue
		}
		d.timers[x.cidr] = since
		d.wake = earliest(d.wake, since.Add(in.delay), in.now)
	}

	// New marks: an empty block the node can do without, excess for the
	// whole delay. Without a usage report a block is never excess.
	for _, x := range unmarked {
		if !x.reported || x.used != 0 || free[x.family]-x.capacity < need {
			continue
		}
		free[x.family] -= x.capacity
		since, ok := in.timers[timerKey{n.UID, x.cidr}]
		if !ok {
			since = in.now
		}
		d.timers[x.cidr] = since
		if in.now.Sub(since) < in.delay {
			d.wake = earliest(d.wake, since.Add(in.delay), in.now)
			continue
		}
		spec.Releases = append(spec.Releases, v1alpha1.ReleaseMark{CIDR: x.cidr, State: v1alpha1.MarkedForRelease, Since: metav1.NewTime(in.now)})
		changed = true
		note(&d.changes, x.cidr, actionMark, "empty and excess for %s: %d free %s addresses without it, want %d",
			in.now.Sub(since).Round(time.Second), free[x.family], x.family, need)
	}

	for _, f := range families {
		if free[f] < need {
			d.short[f] = need - free[f]
		}
	}
	if changed {
		d.spec = spec
	}
	return d
}

// earliest returns the earlier of the non-zero times a and t, ignoring t
// when it is not after now (a timer that has matured needs no wake-up).
func earliest(a, t, now time.Time) time.Time {
	if !t.After(now) {
		return a
	}
	if a.IsZero() || t.Before(a) {
		return t
	}
	return a
}

// sortFamilies returns the families in fs, IPv4 first, each once.
func sortFamilies(fs map[family]bool) []family {
	out := make([]family, 0, len(fs))
	for f := range fs {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b family) int { return cmp.Compare(a, b) })
	return out
}
