package operator

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// outsideOf says why block b (prefix p) is no longer inside the pool its
// spec.blocks entry names, or "" when it is. A pool whose spec does not
// parse is judged by no one: its ranges are unknown, and draining on a
// spec the operator cannot read would take blocks back for nothing.
func outsideOf(b v1alpha1.Block, p netip.Prefix, pools map[string]*poolInfo) string {
	info := pools[b.Pool]
	if info == nil {
		return fmt.Sprintf("its pool %s no longer exists", b.Pool)
	}
	if info.reason == reasonInvalidSpec {
		return ""
	}
	if slices.ContainsFunc(info.ranges, func(r netip.Prefix) bool { return within(p, r) }) {
		return ""
	}
	return fmt.Sprintf("outside the CIDRs of its pool %s (%v)", b.Pool, info.pool.Spec.CIDRs)
}

// within reports whether p lies wholly inside r.
func within(p, r netip.Prefix) bool {
	return r.Bits() <= p.Bits() && r.Contains(p.Addr())
}

// inPool reports whether block cidr lies inside one of pool's CIDRs as
// the pool is now.
func inPool(pool *v1alpha1.IPPool, cidr v1alpha1.CIDR) bool {
	p, err := cidr.Prefix()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(pool.Spec.CIDRs, func(c v1alpha1.CIDR) bool {
		r, err := c.Prefix()
		return err == nil && within(p, r)
	})
}

// drainBlocks runs the handshake for the node's draining blocks: those
// outside their pool, and those already under a drain mark (which stays a
// drain mark even if its range is added back). spec is the node's new
// spec, n as read. A draining block
//
//   - without a mark is marked at once, drain: true, with no excess delay:
//     an administrator asked for the range back;
//   - under an excess mark has it made a drain mark, so the agent
//     quarantines it even though it holds addresses;
//   - is released (by release) as soon as NodeIPAM.MayRelease holds and no
//     pod the operator sees has an address in it, and only then. Its mark
//     is never withdrawn, whatever the agent answers and however short of
//     addresses the node is.
//
// It returns the changes it made to spec, and notes on the releases pods
// held back.
func drainBlocks(n *v1alpha1.NodeIPAM, spec *v1alpha1.NodeIPAMSpec, draining []block, in *input, release func(block)) (out, held []change) {
	now := in.now
	for _, x := range draining {
		why := x.outside
		if why == "" {
			why = "under a drain mark, which is never withdrawn"
		}
		m := spec.Mark(x.cidr)
		switch {
		case m != nil && m.State == v1alpha1.MarkedForRelease && n.MayRelease(x.cidr):
			if pod := in.pods.holdsRelease(x.prefix); pod != "" {
				held = append(held, change{cidr: x.cidr, action: actionWait, why: "drained: " + pod})
				continue
			}
			release(x)
			out = append(out, change{cidr: x.cidr, action: actionRelease, drain: true,
				why: fmt.Sprintf("drained: %s, and the agent answered ready-for-release for generation %d", why, n.Generation)})
		case m == nil:
			spec.Releases = append(spec.Releases, v1alpha1.ReleaseMark{
				CIDR: x.cidr, State: v1alpha1.MarkedForRelease, Since: metav1.NewTime(now), Drain: true,
			})
			out = append(out, change{cidr: x.cidr, action: actionDrain,
				why: why + ": the node allocates nothing more from it, and it goes back once its pods are deleted"})
		case !m.Drain:
			m.Drain, m.Since = true, metav1.NewTime(now)
			out = append(out, change{cidr: x.cidr, action: actionDrain,
				why: why + ": its excess mark becomes a drain mark, which is never withdrawn"})
		}
	}
	return out, held
}

// poolsByName indexes parsed pools by name.
func poolsByName(pools []*poolInfo) map[string]*poolInfo {
	out := make(map[string]*poolInfo, len(pools))
	for _, p := range pools {
		out[p.pool.Name] = p
	}
	return out
}

// confirmDrains is called before a spec update that drains a block. The
// plan judged the block outside its pool on the informer's cache of
// IPPools, which may be behind the NodeIPAMs: a range added to a pool, and
// a block cut from it (the ledger reads the pool from the API server), can
// reach the cache in either order. A drain mark is never withdrawn, so the
// pools concerned are read from the API server and the node decided again
// on them. It returns the update to write (nil: nothing) and the input it
// was decided on, for decisions after a conflict.
func (c *controller) confirmDrains(ctx context.Context, u specUpdate, in *input) (*specUpdate, *input, error) {
	var names []string
	for _, ch := range u.changes {
		if ch.action != actionDrain {
			continue
		}
		if b := u.old.Spec.Block(ch.cidr); b != nil && !slices.Contains(names, b.Pool) {
			names = append(names, b.Pool)
		}
	}
	if len(names) == 0 {
		return &u, in, nil
	}
	again := *in
	again.pools = slices.Clone(in.pools)
	for _, name := range names {
		fresh, err := c.c.lockstep.IPPools().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("confirm ippool %s before draining its blocks: %w", name, err)
		}
		again.pools = slices.DeleteFunc(again.pools, func(p *v1alpha1.IPPool) bool { return p.Name == name })
		if err == nil {
			again.pools = append(again.pools, fresh)
		}
	}
	d := c.redecide(u.old, &again)
	if d.spec == nil {
		c.log.Debug("the IPPool cache was behind; nothing to drain", "nodeipam", u.old.Name, "pools", names)
		return nil, &again, nil
	}
	next := u.old.DeepCopy()
	next.Spec = *d.spec
	return &specUpdate{old: u.old, new: next, changes: d.changes}, &again, nil
}
