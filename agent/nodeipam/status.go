package nodeipam

import (
	"slices"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/store"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// statusOf computes the status the agent owes n, whose spec it has applied
// (generation n.Generation), from the store as txn sees it:
//
//   - blocks: one usage entry per block the store holds, retired and
//     overlapping ones included, so the operator sees addresses held
//     outside spec.blocks;
//   - releases: an answer to each marked-for-release mark: ready-for-release
//     only for a block the store holds quarantined, for this very NodeIPAM,
//     with no allocation inside its CIDR in any pool; do-not-release
//     otherwise. An answer keeps its since time while its state does not
//     change. Released marks get no answer, which removes the agent's
//     entry once the operator has taken the block.
//
// Quarantine happens in the apply transaction that also checked the block,
// and nothing lifts it but a later spec without the mark, so an answer
// computed here stays true for as long as observedGeneration names this
// spec. A block under an excess mark is quarantined only once found empty;
// one under a drain mark is quarantined with its pods' addresses in it,
// and its answer turns ready-for-release here, under the same spec, once
// the last of them is released: no allocation can arrive in a quarantined
// block meanwhile.
func statusOf(txn *store.Txn, n *v1alpha1.NodeIPAM, now metav1.Time) (v1alpha1.NodeIPAMStatus, error) {
	out := v1alpha1.NodeIPAMStatus{ObservedGeneration: n.Generation}
	rows, err := store.Blocks(txn, nil)
	if err != nil {
		return out, err
	}
	slices.SortFunc(rows, func(a, b *store.Block) int {
		if c := a.CIDR.Addr().Compare(b.CIDR.Addr()); c != 0 {
			return c
		}
		return a.CIDR.Bits() - b.CIDR.Bits()
	})
	held := map[string]*store.Block{}
	used := map[string]int{}
	for _, b := range rows {
		n, err := store.CountAllocations(txn, b.Name)
		if err != nil {
			return out, err
		}
		held[b.Name], used[b.Name] = b, n
		out.Blocks = append(out.Blocks, v1alpha1.BlockUsage{CIDR: v1alpha1.CIDR(b.Name), Allocated: int32(n)})
	}
	for _, m := range n.Spec.Releases {
		if m.State != v1alpha1.MarkedForRelease {
			continue
		}
		state := v1alpha1.DoNotRelease
		if b := held[string(m.CIDR)]; b != nil && b.State == store.BlockQuarantined && b.Owner == string(n.UID) && used[b.Name] == 0 {
			in, err := endpoints.CountIn(txn, b.CIDR)
			if err != nil {
				return out, err
			}
			if in == 0 {
				state = v1alpha1.ReadyForRelease
			}
		}
		since := now
		if old := n.Status.Answer(m.CIDR); old != nil && old.State == state {
			since = old.Since
		}
		out.Releases = append(out.Releases, v1alpha1.ReleaseAnswer{CIDR: m.CIDR, State: state, Since: since})
	}
	return out, nil
}

// answersChanged reports whether want differs from have in what the
// operator acts on: observedGeneration or any answer. Such a change is
// written at once; a usage change alone waits for the report interval.
func answersChanged(have, want v1alpha1.NodeIPAMStatus) bool {
	return have.ObservedGeneration != want.ObservedGeneration ||
		!slices.EqualFunc(have.Releases, want.Releases, func(a, b v1alpha1.ReleaseAnswer) bool {
			return a.CIDR == b.CIDR && a.State == b.State
		})
}

// usageChanged reports whether the usage report differs.
func usageChanged(have, want v1alpha1.NodeIPAMStatus) bool {
	return !slices.Equal(have.Blocks, want.Blocks)
}
