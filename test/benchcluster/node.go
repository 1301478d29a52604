package benchcluster

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// LocalEndpoints is how many pods of the node under test have a veth the
// dataplane is attached to.
const LocalEndpoints = 20

// LocalPod is the k-th pod of the node under test: app k of namespace k,
// so the policy of its app selects it.
func LocalPod(k int) *policyapi.Pod {
	return AppPod(NsName(k), k%Apps, fmt.Sprintf("local-%d", k))
}

// LocalAddr is the address of the k-th local pod, outside the remote
// pods' 10.0.0.0/16.
func LocalAddr(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 250, 0, byte(k + 1)}) }

// HostIf is the host-side veth of the k-th local pod (CreateVeths).
func HostIf(k int) string { return fmt.Sprintf("lsb%d", k) }

// LoadStore commits c, the local pods and their Ready endpoints in one
// transaction.
func LoadStore(st *store.Store, c *Cluster) error {
	txn := st.WriteTxn()
	defer txn.Abort()
	objs := store.Objects{Namespaces: c.Namespaces, Pods: c.Pods, Policies: c.Policies, Services: c.Services}
	for k := range LocalEndpoints {
		objs.Pods = append(objs.Pods, LocalPod(k))
	}
	if _, err := store.ReplaceObjects(txn, objs); err != nil {
		return fmt.Errorf("load cluster into the store: %w", err)
	}
	for _, s := range c.EndpointSlices {
		if err := store.UpsertEndpointSlice(txn, s); err != nil {
			return fmt.Errorf("load cluster into the store: %w", err)
		}
	}
	for k := range LocalEndpoints {
		p := LocalPod(k)
		ep := &store.Endpoint{
			Attachment: store.Attachment{ContainerID: fmt.Sprintf("bench-%d", k), IfName: "eth0"},
			HostIfName: HostIf(k),
			Pod:        store.PodRef{Namespace: p.Namespace, Name: p.Name, UID: "uid-" + p.Name},
			Addresses:  []store.AddressRef{{Pool: "bench", Addr: LocalAddr(k), Bits: 24}},
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

// TimeWrite commits write in one transaction and syncs enf, and returns
// how long both took: from the start of the write transaction until
// enforcer.Sync returned with the change applied.
func TimeWrite(ctx context.Context, st *store.Store, enf *enforcer.Enforcer, write func(*store.Txn) error) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	txn := st.WriteTxn()
	if err := write(txn); err != nil {
		txn.Abort()
		return 0, err
	}
	txn.Commit()
	if err := enf.Sync(ctx); err != nil {
		return 0, fmt.Errorf("sync: %w", err)
	}
	return time.Since(start), nil
}
