package nodeipam

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// assignment is what the agent takes from a NodeIPAM it has verified to be
// its own node's (NodeIPAM.ControlledBy): the blocks, and which of them the
// operator wants back. A nil *assignment means no NodeIPAM is usable: every
// block the store holds is no longer assigned.
type assignment struct {
	// uid is the NodeIPAM's UID, recorded as each block's owner.
	uid string
	// generation is the spec's metadata.generation.
	generation int64
	// blocks are spec.blocks in spec order, without the invalid ones.
	blocks []assigned
	// marked are the blocks with a marked-for-release mark; drain are
	// those of them whose mark is a drain mark (ReleaseMark.Drain).
	marked, drain map[string]bool
	// released are the blocks with a released mark.
	released map[string]bool
}

// assigned is one valid entry of spec.blocks.
type assigned struct {
	name   string
	cidr   netip.Prefix
	ipPool string
}

// event is a log line apply decided on; it is written only once the
// transaction that made it true has committed.
type event struct {
	level slog.Level
	msg   string
	args  []any
}

// assignmentOf reads n's spec. A block whose CIDR the agent cannot parse is
// left out and reported (the API server validates CIDRs, so this means a
// CRD older than the agent).
func assignmentOf(n *v1alpha1.NodeIPAM) (*assignment, []event) {
	a := &assignment{uid: string(n.UID), generation: n.Generation, marked: map[string]bool{}, drain: map[string]bool{}, released: map[string]bool{}}
	var events []event
	seen := map[string]bool{}
	for _, b := range n.Spec.Blocks {
		p, err := b.CIDR.Prefix()
		if err != nil {
			events = append(events, event{slog.LevelError, "ignoring a block of the NodeIPAM the agent cannot read", []any{"block", b.CIDR, "err", err}})
			continue
		}
		name := endpoints.PoolName(p)
		if seen[name] {
			continue
		}
		seen[name] = true
		a.blocks = append(a.blocks, assigned{name: name, cidr: p, ipPool: b.Pool})
	}
	for _, m := range n.Spec.Releases {
		switch m.State {
		case v1alpha1.MarkedForRelease:
			a.marked[string(m.CIDR)] = true
			a.drain[string(m.CIDR)] = m.Drain
		case v1alpha1.Released:
			a.released[string(m.CIDR)] = true
		}
	}
	return a, events
}

// applier is one apply transaction.
type applier struct {
	txn    *store.Txn
	svc    *endpoints.Service
	pods   *endpoints.PodList
	a      *assignment
	why    string // why nothing is assigned, when a is nil
	events []event
	// states are the blocks' states as this transaction leaves them.
	states map[string]store.BlockState
	// unrecorded are the pools with no block in the store.
	unrecorded map[string]bool
}

// applyTxn makes the store's blocks and pools what a assigns, inside txn,
// and returns what to log once txn commits. It is the whole of the agent's
// side of spec.blocks and spec.releases, and runs in one store write
// transaction, so every ADD either commits before it (and is counted) or
// after it (and sees every pool it quarantined as draining):
//
//   - A block no longer assigned gives up the addresses of endpoints whose
//     pod is gone (by pods, the last consistent pod list, through the
//     endpoints service's one release path) and, once empty, leaves the
//     store together with its pool. A block still holding addresses of
//     live endpoints is kept, retired and draining, and reported as an
//     error: a live pod's address is never dropped silently.
//   - An assigned block marked for release is checked for allocations, in
//     any pool, inside its CIDR; an empty one is quarantined (its pool
//     drains) in this very transaction. That is the promise behind the
//     ready-for-release answer the status written after the commit
//     carries. A block holding allocations stays as it is, and the answer
//     is do-not-release.
//   - An assigned block under a drain mark (it left its IPPool) is
//     quarantined in this transaction whatever it holds: nothing more is
//     allocated from it, and its endpoints keep their addresses. The
//     answer is do-not-release until the last of them is released, and
//     ready-for-release in the first status computed after that (statusOf
//     counts the block's allocations again each time).
//   - An assigned block that overlaps another block or pool the node
//     holds is never merged into it: it is kept unused (overlapping) and
//     reported, until the other one is gone.
//   - Every other assigned block is active; a quarantine whose mark was
//     withdrawn is lifted.
//
// why says, for a nil a, why no NodeIPAM is usable; it goes into the log.
func applyTxn(txn *store.Txn, svc *endpoints.Service, a *assignment, pods *endpoints.PodList, why string) ([]event, error) {
	ap := &applier{txn: txn, svc: svc, pods: pods, a: a, why: why, states: map[string]store.BlockState{}, unrecorded: map[string]bool{}}
	if err := ap.run(); err != nil {
		return nil, err
	}
	return ap.events, nil
}

func (ap *applier) logf(level slog.Level, msg string, args ...any) {
	ap.events = append(ap.events, event{level, msg, args})
}

func (ap *applier) run() error {
	rows, err := store.Blocks(ap.txn, nil)
	if err != nil {
		return err
	}
	want := map[string]assigned{}
	if ap.a != nil {
		for _, b := range ap.a.blocks {
			want[b.name] = b
		}
	}
	held := map[string]*store.Block{}
	for _, row := range rows {
		held[row.Name] = row
		ap.states[row.Name] = row.State
	}
	// Pools without a block (restored from the state file for addresses
	// of a block it no longer records) are blocks of unknown origin.
	pools, err := store.Pools(ap.txn, nil)
	if err != nil {
		return err
	}
	for _, p := range pools {
		if held[p.Name] == nil {
			held[p.Name] = &store.Block{Name: p.Name, CIDR: p.CIDR, State: store.BlockRetired}
			ap.unrecorded[p.Name] = true
		}
	}

	// Blocks given up first, so that an assigned block they overlapped is
	// free to be used in the same transaction.
	for _, name := range sortedKeys(held) {
		if _, ok := want[name]; !ok {
			if err := ap.giveUp(held[name]); err != nil {
				return err
			}
		}
	}
	if ap.a == nil {
		return nil
	}
	// Established blocks keep precedence over new ones they overlap.
	order := slices.Clone(ap.a.blocks)
	slices.SortStableFunc(order, func(x, y assigned) int {
		return rank(held[x.name]) - rank(held[y.name])
	})
	for _, b := range order {
		if err := ap.assign(b, held[b.name]); err != nil {
			return err
		}
	}
	return nil
}

// rank orders blocks for assign: those the node already uses first.
func rank(row *store.Block) int {
	if row != nil && (row.State == store.BlockActive || row.State == store.BlockQuarantined) {
		return 0
	}
	return 1
}

// giveUp handles a block the node holds that is not assigned to it.
func (ap *applier) giveUp(row *store.Block) error {
	allocs, err := store.AllocationsByPool(ap.txn, nil, row.Name)
	if err != nil {
		return err
	}
	if len(allocs) > 0 && ap.pods != nil {
		holders := map[store.Attachment]bool{}
		for _, al := range allocs {
			holders[al.Attachment] = true
		}
		orphaned := endpoints.Orphaned(*ap.pods)
		released, _, err := ap.svc.ReleaseTxn(ap.txn, func(e *store.Endpoint) bool {
			return holders[e.Attachment] && orphaned(e)
		})
		if err != nil {
			return err
		}
		for _, e := range released {
			ap.logf(slog.LevelInfo, "released the addresses of an endpoint whose pod is gone, with the block that held them",
				"block", row.Name, "pod", e.Pod.Namespace+"/"+e.Pod.Name, "uid", e.Pod.UID, "addresses", e.Addresses)
		}
		if allocs, err = store.AllocationsByPool(ap.txn, nil, row.Name); err != nil {
			return err
		}
	}
	if len(allocs) == 0 {
		if err := ap.dropPool(row.Name); err != nil {
			return err
		}
		if err := store.DeleteBlock(ap.txn, row.Name); err != nil {
			return err
		}
		delete(ap.states, row.Name)
		switch {
		case ap.a != nil && ap.a.released[row.Name]:
			ap.logf(slog.LevelInfo, "operator took back block", "block", row.Name)
		case !ap.unrecorded[row.Name] || ap.a != nil:
			ap.logf(slog.LevelInfo, "dropped block no longer assigned to this node", "block", row.Name, "why", ap.notAssigned())
		}
		return nil
	}
	if row.State == store.BlockRetired && !ap.unrecorded[row.Name] {
		return nil // already retired and reported
	}
	retired := *row
	retired.State = store.BlockRetired
	if err := ap.put(&retired); err != nil {
		return err
	}
	level := slog.LevelError
	if ap.a == nil {
		level = slog.LevelWarn
	}
	ap.logf(level, "block is no longer assigned to this node but holds addresses of live endpoints; "+
		"keeping it and allocating nothing more from it. If the operator gave it to another node, these pods' addresses "+
		"are duplicated: delete the pods listed here so that they are re-created with new addresses",
		"block", row.Name, "allocated", len(allocs), "pods", podsOf(allocs), "why", ap.notAssigned())
	return nil
}

// notAssigned says why a block is being given up.
func (ap *applier) notAssigned() string {
	if ap.a == nil {
		return ap.why
	}
	return fmt.Sprintf("not in spec.blocks of NodeIPAM uid %s generation %d", ap.a.uid, ap.a.generation)
}

// assign handles an assigned block; row is what the store holds for it.
func (ap *applier) assign(b assigned, row *store.Block) error {
	next := store.Block{Name: b.name, CIDR: b.cidr, IPPool: b.ipPool, Owner: ap.a.uid, State: store.BlockActive}
	old := store.BlockState(0)
	if row != nil {
		old = row.State
		if row.Owner != "" && row.Owner != ap.a.uid {
			n, err := store.CountAllocations(ap.txn, b.name)
			if err != nil {
				return err
			}
			ap.logf(slog.LevelInfo, "block assigned again by a new NodeIPAM (the Node was re-created); "+
				"it is a new assignment: addresses it still holds stay with their endpoints",
				"block", b.name, "previous", row.Owner, "nodeipam", ap.a.uid, "allocated", n)
		}
	}
	overlap, err := ap.overlapping(b)
	if err != nil {
		return err
	}
	switch {
	case ap.a.marked[b.name]:
		// The handshake: the check and the quarantine are this
		// transaction.
		used, err := endpoints.CountIn(ap.txn, b.cidr)
		if err != nil {
			return err
		}
		newly := old != store.BlockQuarantined || row.Owner != ap.a.uid // not quarantined for this NodeIPAM yet
		switch {
		case used == 0:
			next.State = store.BlockQuarantined
			if newly {
				ap.logf(slog.LevelInfo, "block marked for release is empty: quarantined, answering ready-for-release",
					"block", b.name, "drain", ap.a.drain[b.name], "generation", ap.a.generation)
			}
		case overlap != "":
			next.State = store.BlockOverlapping
		case ap.a.drain[b.name]:
			// Outside its IPPool: allocate nothing more from it, and
			// let its pods keep their addresses until they go.
			next.State = store.BlockQuarantined
			if newly {
				ap.logf(slog.LevelInfo, "block is outside its IPPool and drains: quarantined, allocating nothing more from it; "+
					"its pods keep their addresses, and it is answered ready-for-release once the last of them is deleted",
					"block", b.name, "ippool", b.ipPool, "allocated", used, "generation", ap.a.generation)
			}
		default:
			ap.logf(slog.LevelDebug, "block marked for release holds addresses: answering do-not-release",
				"block", b.name, "allocated", used, "generation", ap.a.generation)
		}
	case overlap != "":
		next.State = store.BlockOverlapping
	}
	if next.State == store.BlockOverlapping && old != store.BlockOverlapping {
		ap.logf(slog.LevelError, "assigned block overlaps a block or pool this node still holds; an address never moves from one "+
			"block to another, so the agent allocates nothing from it until the other is gone (an operator or IPPool error)",
			"block", b.name, "overlaps", overlap)
	}
	if old == store.BlockQuarantined && next.State == store.BlockActive {
		ap.logf(slog.LevelInfo, "release mark withdrawn: allocating from the block again", "block", b.name)
	}
	if row != nil && row.Name == next.Name && row.CIDR == next.CIDR && row.IPPool == next.IPPool &&
		row.Owner == next.Owner && row.State == next.State {
		return ap.syncPool(row)
	}
	return ap.put(&next)
}

// overlapping returns the name of a pool, other than b's own, that
// overlaps b and is not itself kept unused for overlapping; "" if none.
func (ap *applier) overlapping(b assigned) (string, error) {
	pools, err := store.Pools(ap.txn, nil)
	if err != nil {
		return "", err
	}
	for _, p := range pools {
		if p.Name != b.name && p.CIDR.Overlaps(b.cidr) && ap.states[p.Name] != store.BlockOverlapping {
			return p.Name, nil
		}
	}
	return "", nil
}

// put records b and makes its pool match it.
func (ap *applier) put(b *store.Block) error {
	if err := store.UpsertBlock(ap.txn, b); err != nil {
		return err
	}
	ap.states[b.Name] = b.State
	return ap.syncPool(b)
}

// syncPool makes b's pool exist, draining unless b is active.
func (ap *applier) syncPool(b *store.Block) error {
	want := store.Pool{Name: b.Name, CIDR: b.CIDR, Draining: b.State != store.BlockActive}
	p, err := store.PoolByName(ap.txn, nil, b.Name)
	if err != nil {
		return err
	}
	if p != nil && p.CIDR == want.CIDR && p.Draining == want.Draining {
		return nil
	}
	return store.UpsertPool(ap.txn, want)
}

// dropPool deletes the pool called name, if there is one.
func (ap *applier) dropPool(name string) error {
	p, err := store.PoolByName(ap.txn, nil, name)
	if err != nil || p == nil {
		return err
	}
	return store.DeletePool(ap.txn, name)
}

// podsOf names the pods holding allocs, for the log.
func podsOf(allocs []*store.Allocation) string {
	var out []string
	for _, a := range allocs {
		pod := a.Pod.Namespace + "/" + a.Pod.Name
		if a.Pod.Name == "" {
			pod = "container " + a.ContainerID
		}
		out = append(out, fmt.Sprintf("%s (%s)", pod, a.Addr))
	}
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// loadBlocks puts the blocks of the state file into the store, each with a
// draining pool: what the agent promised survives the restart (a
// quarantined block stays quarantined), and no block is allocated from
// until a NodeIPAM verified to be this node's assigns it again. Nothing is
// written back: the file is already the truth.
func loadBlocks(st *store.Store, blocks []*store.Block) error {
	txn := st.RestoreTxn()
	defer txn.Abort()
	for _, b := range blocks {
		if err := store.UpsertBlock(txn, b); err != nil {
			return err
		}
		p, err := store.PoolByName(txn, nil, b.Name)
		if err != nil {
			return err
		}
		if p != nil && p.CIDR != b.CIDR {
			return fmt.Errorf("restore block %s: its pool has range %s", b.Name, p.CIDR)
		}
		if p == nil || !p.Draining {
			if err := store.UpsertPool(txn, store.Pool{Name: b.Name, CIDR: b.CIDR, Draining: true}); err != nil {
				return err
			}
		}
	}
	return txn.Commit()
}
