package operator

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	apiequality "lockstep.dev/lockstep/kube/api/equality"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// node is what the planner needs of a Node.
type node struct {
	name     string
	uid      types.UID
	deleting bool
}

// input is everything a plan is made from. Nothing in it is modified.
type input struct {
	pools     []*v1alpha1.IPPool
	nodes     []node
	nodeIPAMs []*v1alpha1.NodeIPAM
	now       time.Time
	timers    timers
	// reserved are blocks of stale NodeIPAMs this replica deleted, by
	// Node name; see reservation.
	reserved map[string]reservation
	minFree  int64
	delay    time.Duration
	// pods are the addresses running pods hold, on any node: no block
	// one of them is in is released, whatever its agent answers.
	pods podAddrs
}

// reservation keeps the blocks of a deleted stale NodeIPAM held until the
// replacement's agent has reported on it. The agent on a re-created Node
// may still hold addresses in its predecessor's blocks (it reports them,
// as retired, in status.blocks of the replacement), but between the delete
// and that first report nothing in the API says so. Reservations live in
// memory only, like timers.
type reservation struct {
	nodeUID types.UID
	blocks  []v1alpha1.CIDR
}

// staleNodeIPAM is a NodeIPAM whose name is a Node's but whose controller
// owner is not that Node: its predecessor's, left for a garbage collector
// that has not run yet (seed 003).
type staleNodeIPAM struct {
	name    string
	uid     types.UID // the stale object's: the delete's precondition
	owner   types.UID // the previous Node's UID, or empty if none
	nodeUID types.UID // the current Node's UID
	// blocks are what it holds: assigned, released or reported.
	blocks []v1alpha1.CIDR
}

// specUpdate is a new spec for a NodeIPAM that gives or takes no block
// except through the release handshake.
type specUpdate struct {
	old     *v1alpha1.NodeIPAM // as read; its resourceVersion is the precondition
	new     *v1alpha1.NodeIPAM
	changes []change
}

// assignment gives one block to one NodeIPAM. Assignments are written
// through the pool's ledger (ledger.go), never straight from a plan.
type assignment struct {
	nodeIPAM string
	uid      types.UID // the NodeIPAM's own UID
	block    v1alpha1.Block
}

// plan is every write the operator wants, made by planFor from an input.
type plan struct {
	creates    []*v1alpha1.NodeIPAM
	deletes    []staleNodeIPAM
	updates    []specUpdate
	assigns    []assignment
	poolStatus []*v1alpha1.IPPool // copies with the new status
	timers     timers
	reserved   map[string]reservation // still needed
	wake       time.Time              // earliest timer to mature; zero if none
	notes      []string               // for the log: orphans, starved nodes, restarted timers
}

// planFor decides, from the pools, Nodes and NodeIPAMs as last read, what
// to write. It is the whole of the operator's judgement; the controller
// only reads and writes.
//
// Held blocks are every block in some NodeIPAM's spec.blocks, current,
// stale or orphaned; every block with a released mark still on it; and
// every block an agent still reports usage of, in spec.blocks or not (the
// agent reports a block until it has left its store), and every address a
// running pod has: no block is cut again while any of them exists.
func planFor(in *input) plan {
	out := plan{timers: timers{}, reserved: map[string]reservation{}}
	pools := parsePools(in.pools)
	byPool := poolsByName(pools)
	families := map[family]bool{}
	for _, p := range pools {
		if p.ready() {
			families[p.family] = true
		}
	}
	fams := sortFamilies(families)

	held := newHeldSet()
	allocated := map[string]int32{}
	byName := map[string]*v1alpha1.NodeIPAM{}
	for _, n := range in.nodeIPAMs {
		byName[n.Name] = n
		for _, b := range n.Spec.Blocks {
			allocated[b.Pool]++
		}
		for _, c := range heldBy(n) {
			if p, err := c.Prefix(); err == nil {
				held.add(p, n.Name)
			}
		}
	}

	for _, p := range in.pods {
		held.add(netip.PrefixFrom(p.addr, p.addr.BitLen()), "pod "+p.pod)
	}

	byNode := map[string]node{}
	for _, nd := range in.nodes {
		byNode[nd.name] = nd
	}
	for name, r := range in.reserved {
		nd, ok := byNode[name]
		if n := byName[name]; !ok || nd.uid != r.nodeUID || n != nil && n.ControlledBy(r.nodeUID) && n.StatusCurrent() {
			continue // the Node is gone again, or its agent has reported
		}
		out.reserved[name] = r
		for _, c := range r.blocks {
			if p, err := c.Prefix(); err == nil {
				held.add(p, name)
			}
		}
	}

	type request struct {
		n      *v1alpha1.NodeIPAM
		family family
		short  int64
	}
	var requests []request
	nodes := slices.Clone(in.nodes)
	slices.SortFunc(nodes, func(a, b node) int { return cmpString(a.name, b.name) })
	nodeNames := map[string]bool{}
	for _, nd := range nodes {
		nodeNames[nd.name] = true
		n := byName[nd.name]
		switch {
		case n == nil:
			if !nd.deleting {
				out.creates = append(out.creates, v1alpha1.NewNodeIPAM(nd.name, nd.uid))
			}
			continue
		case !n.ControlledBy(nd.uid):
			if n.DeletionTimestamp == nil {
				s := staleNodeIPAM{name: n.Name, uid: n.UID, nodeUID: nd.uid, blocks: heldBy(n)}
				if ref := metav1.GetControllerOfNoCopy(n); ref != nil {
					s.owner = ref.UID
				}
				out.deletes = append(out.deletes, s)
			}
			continue
		}
		d := decideNode(n, fams, byPool, in)
		for cidr, t := range d.timers {
			out.timers[timerKey{n.UID, cidr}] = t
		}
		out.wake = earliest(out.wake, d.wake, in.now)
		for _, c := range d.notes {
			out.notes = append(out.notes, fmt.Sprintf("nodeipam %s block %s: %s", n.Name, c.cidr, c.why))
		}
		if d.spec != nil {
			nn := n.DeepCopy()
			nn.Spec = *d.spec
			out.updates = append(out.updates, specUpdate{old: n, new: nn, changes: d.changes})
		}
		if nd.deleting || n.DeletionTimestamp != nil {
			continue
		}
		for _, f := range fams {
			if s := d.short[f]; s > 0 {
				requests = append(requests, request{n: n, family: f, short: s})
			}
		}
	}
	for _, n := range in.nodeIPAMs {
		if !nodeNames[n.Name] && len(n.Spec.Blocks) > 0 {
			out.notes = append(out.notes, fmt.Sprintf("nodeipam %s has no Node of its name; its %d blocks stay held until it is garbage collected", n.Name, len(n.Spec.Blocks)))
		}
	}

	// Cut blocks, nodes in name order, pools of a family in name order.
	walkers := map[string]*freeBlocks{}
	walker := func(p *poolInfo) *freeBlocks {
		w, ok := walkers[p.pool.Name]
		if !ok {
			w = newFreeBlocks(p.ranges, p.size, held)
			walkers[p.pool.Name] = w
		}
		return w
	}
	for _, r := range requests {
		for _, p := range pools {
			if !p.ready() || p.family != r.family || r.short <= 0 {
				continue
			}
			w := walker(p)
			for r.short > 0 {
				c, ok := w.take(r.n.Name)
				if !ok {
					break
				}
				out.assigns = append(out.assigns, assignment{
					nodeIPAM: r.n.Name,
					uid:      r.n.UID,
					block:    v1alpha1.Block{CIDR: v1alpha1.CIDRFromPrefix(c), Pool: p.pool.Name},
				})
				r.short -= capacity(c)
			}
		}
		if r.short > 0 {
			out.notes = append(out.notes, fmt.Sprintf("node %s needs %d more free %s addresses and every pool of the family is exhausted", r.n.Name, r.short, r.family))
		}
	}

	for _, p := range pools {
		exhausted := false
		if p.ready() {
			_, free := walker(p).peek()
			exhausted = !free
		}
		st := poolStatus(p, allocated[p.pool.Name], exhausted, in.now)
		if !apiequality.Semantic.DeepEqual(st, &p.pool.Status) {
			np := p.pool.DeepCopy()
			np.Status = *st
			out.poolStatus = append(out.poolStatus, np)
		}
	}
	return out
}

// heldBy returns every block n holds: assigned, released or reported.
func heldBy(n *v1alpha1.NodeIPAM) []v1alpha1.CIDR {
	var out []v1alpha1.CIDR
	for _, b := range n.Spec.Blocks {
		out = append(out, b.CIDR)
	}
	for _, m := range n.Spec.Releases {
		if m.State == v1alpha1.Released {
			out = append(out, m.CIDR)
		}
	}
	for _, u := range n.Status.Blocks {
		out = append(out, u.CIDR)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// poolStatus is the status pool p should have.
func poolStatus(p *poolInfo, allocated int32, exhausted bool, now time.Time) *v1alpha1.IPPoolStatus {
	st := p.pool.Status.DeepCopy()
	gen := p.pool.Generation
	st.ObservedGeneration = gen
	st.AllocatedBlocks = allocated
	ready := metav1.Condition{
		Type: v1alpha1.IPPoolReady, Status: metav1.ConditionTrue, Reason: p.reason,
		Message: "blocks are handed out from this pool", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
	}
	if !p.ready() {
		ready.Status, ready.Message = metav1.ConditionFalse, p.problem+"; no block is handed out until the spec is fixed"
	}
	metav1.SetStatusCondition(&st.Conditions, ready)
	ex := metav1.Condition{
		Type: v1alpha1.IPPoolExhausted, Status: metav1.ConditionFalse, Reason: "FreeBlocks",
		Message: "at least one block is free", ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
	}
	switch {
	case !p.ready():
		ex.Status, ex.Reason, ex.Message = metav1.ConditionUnknown, "NotReady", "the pool is not Ready"
	case exhausted:
		ex.Status, ex.Reason, ex.Message = metav1.ConditionTrue, "NoFreeBlock", "every block is held by a node; add a CIDR to the pool"
	}
	metav1.SetStatusCondition(&st.Conditions, ex)
	return st
}

// decideOne re-runs the node decision for one NodeIPAM read fresh after a
// conflict, with the same pools, time and timers as the plan it replaces.
func decideOne(n *v1alpha1.NodeIPAM, in *input) nodeDecision {
	pools := parsePools(in.pools)
	families := map[family]bool{}
	for _, p := range pools {
		if p.ready() {
			families[p.family] = true
		}
	}
	return decideNode(n, sortFamilies(families), poolsByName(pools), in)
}
