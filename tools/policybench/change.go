//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"lockstep.dev/lockstep/internal/benchkit"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/nodesim"
)

// localEndpoints is how many pods of the node under test have a veth the
// datapath is attached to.
const localEndpoints = 20

// changeResult is what the policy-change benchmark measured.
type changeResult struct {
	edits      int
	endToEnd   []time.Duration // UpsertPolicy commit → enforcer.Sync returned
	compile    []time.Duration // policy.Compile of the same snapshot
	apply      []time.Duration // datapath.Apply of a precompiled one-edit change
	addrs      int             // ipcache entries of the compiled state
	rules      int             // rules over all local endpoints
	identities int
}

// localPod is the k-th pod of the node under test: app k of namespace k,
// so the policy of its app selects it.
func localPod(k int) *policy.Pod {
	return appPod(nsName(k), k%clusterApps, fmt.Sprintf("local-%d", k))
}

// localAddr is the address of the k-th local pod, outside the remote pods'
// 10.0.0.0/16.
func localAddr(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 250, 0, byte(k + 1)}) }

// editPolicy is the i-th edit: the policy selecting local pod i%20 gets a
// new port range, so that endpoint's rules change.
func editPolicy(i int) *policy.NetworkPolicy {
	k := i % localEndpoints
	return appPolicy(nsName(k), k, k%clusterApps, i+1)
}

// benchPolicyChange loads the cluster into a store, attaches the datapath
// to localEndpoints veths in a fresh netns (bpffs on a temporary mount) and
// times edits one by one through the enforcer, as the agent applies them.
func (b *bench) benchPolicyChange(ctx context.Context, c *cluster, edits int) (*changeResult, error) {
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
	if err := loadStore(st, c); err != nil {
		return nil, err
	}
	res := &changeResult{edits: edits}
	err = node.Do(func(ns.NetNS) error {
		// Every call below runs on this locked thread, inside node: the
		// veths, Attach's filters and the enforcer's Sync all see it.
		for k := range localEndpoints {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf(k)}, PeerName: fmt.Sprintf("lsbp%d", k)}
			if err := netlink.LinkAdd(veth); err != nil {
				return fmt.Errorf("create veth %s: %w", hostIf(k), err)
			}
			if err := netlink.LinkSetUp(veth); err != nil {
				return fmt.Errorf("set %s up: %w", hostIf(k), err)
			}
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
		for k := range localEndpoints {
			if !enf.Enforced(hostIf(k)) {
				return fmt.Errorf("%s: %w after the first sync", hostIf(k), enforcer.ErrNotEnforced)
			}
		}
		logf("  first sync (attach %d endpoints, apply everything): %s", localEndpoints, benchkit.FmtDur(time.Since(start)))

		prog := newProgress("policy edits", edits)
		var desired []*policy.Desired
		for i := range edits {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			txn := st.WriteTxn()
			if err := store.UpsertPolicy(txn, editPolicy(i)); err != nil {
				txn.Abort()
				return err
			}
			txn.Commit()
			if err := enf.Sync(ctx); err != nil {
				return fmt.Errorf("sync edit %d: %w", i, err)
			}
			res.endToEnd = append(res.endToEnd, time.Since(start))

			snap, err := enforcer.Snapshot(st.ReadTxn())
			if err != nil {
				return err
			}
			start = time.Now()
			d, err := policy.Compile(snap)
			if err != nil {
				return err
			}
			res.compile = append(res.compile, time.Since(start))
			if len(desired) < 2 {
				desired = append(desired, d)
			}
			res.addrs, res.identities, res.rules = len(d.Addrs), len(snap.Identities), 0
			for _, ep := range d.Endpoints {
				res.rules += len(ep.Rules)
			}
			prog.step()
		}
		// Apply alone: two precompiled states one edit apart, in turn, after
		// an untimed apply of the second (the maps hold the last edit's).
		if err := dp.Apply(desired[1]); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		for i := range edits {
			start := time.Now()
			if err := dp.Apply(desired[i%2]); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			res.apply = append(res.apply, time.Since(start))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func hostIf(k int) string { return fmt.Sprintf("lsb%d", k) }

// loadStore commits the cluster, the local pods and their Ready endpoints.
func loadStore(st *store.Store, c *cluster) error {
	txn := st.WriteTxn()
	defer txn.Abort()
	objs := store.Objects{Namespaces: c.Namespaces, Pods: c.Pods, Policies: c.Policies}
	for k := range localEndpoints {
		objs.Pods = append(objs.Pods, localPod(k))
	}
	if _, err := store.ReplaceObjects(txn, objs); err != nil {
		return fmt.Errorf("load cluster into the store: %w", err)
	}
	for k := range localEndpoints {
		p := localPod(k)
		ep := &store.Endpoint{
			Attachment: store.Attachment{ContainerID: fmt.Sprintf("policybench-%d", k), IfName: "eth0"},
			HostIfName: hostIf(k),
			Pod:        store.PodRef{Namespace: p.Namespace, Name: p.Name, UID: "uid-" + p.Name},
			Addresses:  []store.AddressRef{{Pool: "bench", Addr: localAddr(k), Bits: 24}},
			State:      store.EndpointReady,
			Created:    time.Now(),
		}
		if err := store.UpsertEndpoint(txn, ep); err != nil {
			return err
		}
	}
	txn.Commit()
	return nil
}
