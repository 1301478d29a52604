//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/probe/nodesim"
)

// changeResult is what the change benchmarks measured: policy edits,
// with Sync's phases, and two kinds of pod churn, end to end.
type changeResult struct {
	edits    int
	endToEnd []time.Duration // UpsertPolicy write → enforcer.Sync returned
	write    []time.Duration // the store write transaction alone
	feed     []time.Duration // Sync: hand the compiler what changed (the change log)
	compile  []time.Duration // Sync: incremental compilation
	apply    []time.Duration // Sync: datapath.Apply (zero when skipped)
	skipped  int             // applies skipped: the compiled state did not change
	full     []time.Duration // policy.Compile of a whole snapshot: the path before incremental compilation
	// elsewhere: edits of policies that select no local endpoint (most
	// edits, in a cluster of many nodes); podChurn: a remote pod of an
	// existing identity appears or leaves (an address changes);
	// identChurn: a pod with a label set of its own appears or leaves (an
	// identity that every endpoint's DNS egress rule picks). End to end,
	// as endToEnd.
	elsewhere, podChurn, identChurn []time.Duration
	elsewhereSkipped                int

	addrs      int // ipcache entries of the compiled state
	rules      int // rules over all local endpoints
	identities int
}

// editPolicy is the i-th edit: the policy selecting local pod i%20 gets a
// new port range, so that endpoint's rules change.
func editPolicy(i int) *policyapi.NetworkPolicy {
	k := i % benchcluster.LocalEndpoints
	return benchcluster.AppPolicy(benchcluster.NsName(k), k, k%benchcluster.Apps, i+1)
}

// editElsewhere is the i-th edit of a policy that selects no local pod:
// that of the next app in local pod i%20's namespace.
func editElsewhere(i int) *policyapi.NetworkPolicy {
	k := i % benchcluster.LocalEndpoints
	return benchcluster.AppPolicy(benchcluster.NsName(k), k, (k+1)%benchcluster.Apps, i+1)
}

// benchPolicyChange loads the cluster into a store, attaches the datapath
// to the local pods' veths in a fresh netns (bpffs on a temporary mount)
// and times changes one by one through the enforcer, as the agent applies
// them: policy edits, then pod churn, then identity churn.
func (b *bench) benchPolicyChange(ctx context.Context, c *benchcluster.Cluster, edits int) (*changeResult, error) {
	node, err := b.newNetns()
	if err != nil {
		return nil, err
	}
	bpfRoot := filepath.Join(b.work, "change-bpf")
	if err := nodesim.MountBPF(bpfRoot); err != nil {
		return nil, err
	}
	b.onCleanup(func() error { return nodesim.UnmountBPF(bpfRoot) })

	st, err := store.New()
	if err != nil {
		return nil, err
	}
	if err := benchcluster.LoadStore(st, c); err != nil {
		return nil, err
	}
	res := &changeResult{edits: edits}
	err = node.Do(func(ns.NetNS) error {
		// Every call below runs on this locked thread, inside node: the
		// veths, Attach's filters and the enforcer's Sync all see it.
		if err := benchcluster.CreateVeths(); err != nil {
			return err
		}
		dp, err := datapath.Load(datapath.Options{PinRoot: filepath.Join(bpfRoot, "lockstep")})
		if err != nil {
			return err
		}
		defer dp.Close()
		enf := enforcer.New(st, dp, nil)
		start := time.Now()
		if err := enf.Sync(ctx); err != nil {
			return fmt.Errorf("first sync: %w", err)
		}
		for k := range benchcluster.LocalEndpoints {
			if !enf.Enforced(benchcluster.HostIf(k)) {
				return fmt.Errorf("%s: %w after the first sync", benchcluster.HostIf(k), enforcer.ErrNotEnforced)
			}
		}
		logf("  first sync (attach %d endpoints, apply everything): %s", benchcluster.LocalEndpoints, benchkit.FmtDur(time.Since(start)))

		var ph enforcer.Phases
		enf.OnPhases(func(p enforcer.Phases) { ph = p })
		if err := benchEdits(ctx, st, enf, res, edits, &ph); err != nil {
			return err
		}
		prog := benchkit.NewProgress("policy edits elsewhere", edits, logf)
		for i := range edits {
			ph = enforcer.Phases{}
			d, err := benchcluster.TimeWrite(ctx, st, enf, func(txn *store.Txn) error { return store.UpsertPolicy(txn, editElsewhere(i)) })
			if err != nil {
				return fmt.Errorf("policy edit elsewhere %d: %w", i, err)
			}
			res.elsewhere = append(res.elsewhere, d)
			if ph.Skipped {
				res.elsewhereSkipped++
			}
			prog.Step()
		}
		if res.podChurn, err = benchChurn(ctx, st, enf, "pod churn", edits, churnPod); err != nil {
			return err
		}
		res.identChurn, err = benchChurn(ctx, st, enf, "identity churn", edits, soloPod)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// benchEdits times edits policy edits through the store and the
// enforcer, each followed by the full compilation it used to cost.
func benchEdits(ctx context.Context, st *store.Store, enf *enforcer.Enforcer, res *changeResult, edits int, ph *enforcer.Phases) error {
	prog := benchkit.NewProgress("policy edits", edits, logf)
	for i := range edits {
		if err := ctx.Err(); err != nil {
			return err
		}
		*ph = enforcer.Phases{}
		start := time.Now()
		txn := st.WriteTxn()
		if err := store.UpsertPolicy(txn, editPolicy(i)); err != nil {
			txn.Abort()
			return err
		}
		txn.Commit()
		written := time.Now()
		if err := enf.Sync(ctx); err != nil {
			return fmt.Errorf("sync edit %d: %w", i, err)
		}
		res.endToEnd = append(res.endToEnd, time.Since(start))
		res.write = append(res.write, written.Sub(start))
		res.feed, res.compile, res.apply = append(res.feed, ph.Feed), append(res.compile, ph.Compile), append(res.apply, ph.Apply)
		if ph.Skipped {
			res.skipped++
		}

		snap, err := enforcer.Snapshot(st.ReadTxn())
		if err != nil {
			return err
		}
		start = time.Now()
		d, err := policy.Compile(snap)
		if err != nil {
			return err
		}
		res.full = append(res.full, time.Since(start))
		res.addrs, res.identities, res.rules = len(d.Addrs), len(snap.Identities), 0
		for _, ep := range d.Endpoints {
			res.rules += len(ep.Rules)
		}
		prog.Step()
	}
	return nil
}

// benchChurn times n pod changes, end to end: pod(i) is written for even
// i and deleted for odd i.
func benchChurn(ctx context.Context, st *store.Store, enf *enforcer.Enforcer, what string, n int, pod func(i int) *policyapi.Pod) ([]time.Duration, error) {
	prog := benchkit.NewProgress(what, n, logf)
	var out []time.Duration
	for i := range n {
		p := pod(i - i%2)
		d, err := benchcluster.TimeWrite(ctx, st, enf, func(txn *store.Txn) error {
			if i%2 == 0 {
				return store.UpsertPod(txn, p)
			}
			return store.DeletePod(txn, p.Namespace, p.Name)
		})
		if err != nil {
			return nil, fmt.Errorf("%s %d: %w", what, i, err)
		}
		out = append(out, d)
		prog.Step()
	}
	return out, nil
}

// churnPod is a remote pod of app i%20 of namespace i%50, an identity the
// cluster has, at an address of its own.
func churnPod(i int) *policyapi.Pod {
	a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
	p := benchcluster.AppPod(benchcluster.NsName(i%benchcluster.Namespaces), i%benchcluster.Apps, fmt.Sprintf("churn-%d", i))
	p.Status = policyapi.PodStatus{Phase: "Running", PodIP: a.String(), PodIPs: []policyapi.PodIP{{IP: a.String()}}}
	return p
}

// soloPod is churnPod with an app label no other pod has: a new identity,
// which every policy's DNS egress rule (to every namespace) picks.
func soloPod(i int) *policyapi.Pod {
	p := churnPod(i)
	p.Labels = map[string]string{"app": fmt.Sprintf("solo-%d", i), "tier": "1"}
	return p
}
