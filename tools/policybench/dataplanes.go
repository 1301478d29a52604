//go:build linux

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"
)

// The dataplanes compared, in report order.
const (
	dpEBPF     = "ebpf"
	dpIPTables = "iptables"
)

var dataplaneKinds = []string{dpEBPF, dpIPTables}

// dataplanePodCounts are the remote pod counts of the change comparison.
var dataplanePodCounts = []int{100, 1000, 10000}

// scratchPolicies is how many policies the from-scratch apply commits: the
// figure Azure NPM published (4 minutes on legacy iptables).
const scratchPolicies = 640

// dpStats is the size of one dataplane's applied state.
type dpStats struct {
	rules, addrs        int // compiled: rules over the local endpoints, ipcache addresses
	ruleLines, chains   int // iptables only: rules and chains, both families
	sets, setEntries    int // iptables only: ipsets and their members
	firstSync           time.Duration
	policies, pods, eps int
}

// dpChange is one (dataplane, pod count) cell of the change comparison.
type dpChange struct {
	kind    string
	pods    int
	changes []time.Duration // store write → enforcer.Sync returned
	skipped int
	stats   dpStats
}

// dataplanesResult is what the dataplane comparison measured.
type dataplanesResult struct {
	edits   int
	mode    iptables.Mode
	changes []dpChange // kind-major, then pod count
	scratch []dpChange // one per kind: 640 policies from an empty dataplane
	atScale []iptScale // one change with ~50k iptables rules loaded, per mode
}

// change returns the cell of kind at pods, or nil.
func (r *dataplanesResult) change(kind string, pods int) *dpChange {
	for i := range r.changes {
		if r.changes[i].kind == kind && r.changes[i].pods == pods {
			return &r.changes[i]
		}
	}
	return nil
}

// scratchOf returns the from-scratch apply of kind, or nil.
func (r *dataplanesResult) scratchOf(kind string) *dpChange {
	for i := range r.scratch {
		if r.scratch[i].kind == kind {
			return &r.scratch[i]
		}
	}
	return nil
}

// sizedCluster is the synthetic cluster cut down to pods remote pods and
// the first policies policies. Pods are taken at an even stride, so that
// 1,000 pods are one replica of every app (every identity) and 100 pods
// are one of every tenth app in every namespace.
func sizedCluster(pods, policies int) *benchcluster.Cluster {
	full := benchcluster.New()
	c := &benchcluster.Cluster{Namespaces: full.Namespaces}
	stride := max(len(full.Pods)/pods, 1)
	for i := 0; i < len(full.Pods) && len(c.Pods) < pods; i += stride {
		c.Pods = append(c.Pods, full.Pods[i])
	}
	c.Policies = full.Policies[:min(policies, len(full.Policies))]
	return c
}

// nsRunner runs every iptables and ipset command inside a namespace: the
// child forks from a thread ns.Do moved into it, whichever goroutine
// calls (iptables-nft runs both families at once). Nothing runs in the
// host's namespace.
type nsRunner struct{ ns ns.NetNS }

// Run implements iptables.Runner.
func (r nsRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	var out []byte
	var runErr error
	if err := r.ns.Do(func(ns.NetNS) error {
		out, runErr = iptables.ExecRunner{}.Run(ctx, name, args, stdin)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("enter %s: %w", r.ns.Path(), err)
	}
	return out, runErr
}

// dpNode is a throwaway node netns with the local veths and a dataplane
// of one kind, ready for an enforcer.
type dpNode struct {
	kind  string
	netns ns.NetNS
	dp    enforcer.Dataplane
	ipt   *iptables.Dataplane // set for iptables
	close func()
}

// newDPNode creates a node netns with the local pods' veths and a
// dataplane of kind: the eBPF programs with their maps on a private
// bpffs, or iptables in mode nft with every command run inside the netns.
// Everything it creates goes at the end of the run.
func (b *bench) newDPNode(kind, tag string) (*dpNode, error) {
	node, err := b.newNetns()
	if err != nil {
		return nil, err
	}
	n := &dpNode{kind: kind, netns: node, close: func() {}}
	err = node.Do(func(ns.NetNS) error {
		return benchcluster.CreateVeths()
	})
	if err != nil {
		return nil, err
	}
	switch kind {
	case dpEBPF:
		bpfRoot := filepath.Join(b.work, "dp-bpf-"+tag)
		if err := mountBPF(b, bpfRoot); err != nil {
			return nil, err
		}
		var dp *datapath.Datapath
		err := node.Do(func(ns.NetNS) error {
			var err error
			dp, err = datapath.Load(datapath.Options{PinRoot: filepath.Join(bpfRoot, "lockstep")})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("load the eBPF datapath: %w", err)
		}
		n.dp, n.close = dp, func() { dp.Close() }
	case dpIPTables:
		r := nsRunner{node}
		d, err := iptables.New(iptables.Options{Mode: iptables.ModeNFT, Runner: r})
		if err != nil {
			return nil, err
		}
		// The netns goes with its rules and sets; purge them first all the
		// same, so that a failure to delete it leaves nothing of lockstep.
		b.onCleanup(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := iptables.Purge(ctx, r, iptables.ModeNFT); err != nil {
				return fmt.Errorf("purge iptables in %s: %w", node.Path(), err)
			}
			return nil
		})
		n.dp, n.ipt = d, d
	default:
		return nil, fmt.Errorf("unknown dataplane %q", kind)
	}
	return n, nil
}

// mountBPF mounts a private bpffs at dir, unmounted at the end of the run.
func mountBPF(b *bench, dir string) error {
	if err := nodesim.MountBPF(dir); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	b.onCleanup(func() error { return nodesim.UnmountBPF(dir) })
	return nil
}

// sync runs enf.Sync inside the node's netns (eBPF attaches there; the
// iptables runner enters it on its own).
func (n *dpNode) sync(ctx context.Context, enf *enforcer.Enforcer) error {
	return n.netns.Do(func(ns.NetNS) error { return enf.Sync(ctx) })
}

// stats fills what the dataplane reports about its applied state.
func (n *dpNode) stats(s *dpStats) {
	if n.ipt == nil {
		return
	}
	st := n.ipt.Stats()
	s.ruleLines, s.chains, s.sets, s.setEntries = st.Rules, st.Chains, st.Sets, st.SetEntries
}

// compiledSize counts the rules and ipcache addresses the store compiles to.
func compiledSize(st *store.Store, s *dpStats) error {
	snap, err := enforcer.Snapshot(st.ReadTxn())
	if err != nil {
		return fmt.Errorf("snapshot the store: %w", err)
	}
	d, err := policy.Compile(snap)
	if err != nil {
		return fmt.Errorf("compile the snapshot: %w", err)
	}
	s.addrs, s.rules, s.eps = len(d.Addrs), 0, len(d.Endpoints)
	for _, ep := range d.Endpoints {
		s.rules += len(ep.Rules)
	}
	return nil
}

// benchDataplanes compares the eBPF and iptables dataplanes in one run:
// policy change → applied latency at each of dataplanePodCounts, then one
// Sync of scratchPolicies policies into an empty dataplane.
func (b *bench) benchDataplanes(ctx context.Context, edits int) (*dataplanesResult, error) {
	res := &dataplanesResult{edits: edits, mode: iptables.ModeNFT}
	for _, pods := range dataplanePodCounts {
		c := sizedCluster(pods, len(benchcluster.New().Policies))
		for _, kind := range dataplaneKinds {
			logf("  %s, %d pods, %d policies: %d edits", kind, len(c.Pods), len(c.Policies), edits)
			r, err := b.dataplaneChange(ctx, kind, c, edits)
			if err != nil {
				return nil, fmt.Errorf("%s at %d pods: %w", kind, pods, err)
			}
			res.changes = append(res.changes, *r)
		}
	}
	c := sizedCluster(benchcluster.Namespaces*benchcluster.Apps*benchcluster.Replicas, scratchPolicies)
	for _, kind := range dataplaneKinds {
		logf("  %s: %d policies from scratch", kind, len(c.Policies))
		r, err := b.dataplaneChange(ctx, kind, c, 0)
		if err != nil {
			return nil, fmt.Errorf("%s from scratch: %w", kind, err)
		}
		res.scratch = append(res.scratch, *r)
	}
	return res, nil
}

// dataplaneChange loads c into a store, times the first Sync into an
// empty dataplane of kind, then edits policy edits one by one, each timed
// from the store write to enforcer.Sync returning, as change.go does.
func (b *bench) dataplaneChange(ctx context.Context, kind string, c *benchcluster.Cluster, edits int) (*dpChange, error) {
	tag := fmt.Sprintf("%d-%d", len(c.Pods), len(c.Policies))
	n, err := b.newDPNode(kind, tag)
	if err != nil {
		return nil, err
	}
	defer n.close()
	st, err := store.New()
	if err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	if err := benchcluster.LoadStore(st, c); err != nil {
		return nil, err
	}
	res := &dpChange{kind: kind, pods: len(c.Pods)}
	res.stats.policies, res.stats.pods = len(c.Policies), len(c.Pods)
	if err := compiledSize(st, &res.stats); err != nil {
		return nil, err
	}
	enf := enforcer.New(st, n.dp, nil)
	start := time.Now()
	if err := n.sync(ctx, enf); err != nil {
		return nil, fmt.Errorf("first sync: %w", err)
	}
	res.stats.firstSync = time.Since(start)
	for k := range benchcluster.LocalEndpoints {
		if !enf.Enforced(benchcluster.HostIf(k)) {
			return nil, fmt.Errorf("%s: %w after the first sync", benchcluster.HostIf(k), enforcer.ErrNotEnforced)
		}
	}
	n.stats(&res.stats)
	logf("    first sync: %s (%d rules compiled; iptables: %d rules, %d sets)", benchkit.FmtDur(res.stats.firstSync),
		res.stats.rules, res.stats.ruleLines, res.stats.sets)

	var ph enforcer.Phases
	enf.OnPhases(func(p enforcer.Phases) { ph = p })
	prog := benchkit.NewProgress(fmt.Sprintf("%s edits at %d pods", kind, len(c.Pods)), max(edits, 1), logf)
	for i := range edits {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ph = enforcer.Phases{}
		start := time.Now()
		txn := st.WriteTxn()
		if err := store.UpsertPolicy(txn, editPolicy(i)); err != nil {
			txn.Abort()
			return nil, fmt.Errorf("write edit %d: %w", i, err)
		}
		txn.Commit()
		if err := n.sync(ctx, enf); err != nil {
			return nil, fmt.Errorf("sync edit %d: %w", i, err)
		}
		res.changes = append(res.changes, time.Since(start))
		if ph.Skipped {
			res.skipped++
		}
		prog.Step()
	}
	if edits > 0 {
		n.stats(&res.stats)
	}
	return res, nil
}
