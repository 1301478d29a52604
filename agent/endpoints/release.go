package endpoints

import (
	"context"
	"net/netip"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/store"
)

// ReleaseTxn releases, inside txn, every endpoint free selects, each with
// all its addresses (store.ReleaseEndpoint), and returns what it released
// and what it kept. An ADD still in flight is always kept, whatever free
// says: it holds its addresses until it is confirmed, aborted or its lease
// runs out.
//
// It is the one release path for endpoints that go without a DEL of their
// own: the CNI GC verb (free: not in the runtime's valid list), the orphan
// reconcile (ReleaseOrphans, free: Orphaned) and agent/nodeipam dropping a
// block. The caller commits txn, which in the agent's durable store
// (store.NewDurable) writes the state file first, so a release is on disk
// before anyone can see it.
func (s *Service) ReleaseTxn(txn *store.Txn, free func(*store.Endpoint) bool) (released, retained []*store.Endpoint, err error) {
	eps, err := store.Endpoints(txn, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range eps {
		if s.inFlight(e) || !free(e) {
			retained = append(retained, e)
			continue
		}
		if _, err := store.ReleaseEndpoint(txn, e.Attachment); err != nil {
			return nil, nil, err
		}
		released = append(released, e)
	}
	return released, retained, nil
}

// GC releases every endpoint not in req.Valid, except ADDs still in flight.
func (s *Service) GC(ctx context.Context, req api.GCRequest) (*api.GCResponse, error) {
	valid := make(map[store.Attachment]bool, len(req.Valid))
	for _, a := range req.Valid {
		valid[toStore(a)] = true
	}
	var released, retained []*store.Endpoint
	err := s.write(ctx, func(txn *store.Txn) (err error) {
		released, retained, err = s.ReleaseTxn(txn, func(e *store.Endpoint) bool { return !valid[e.Attachment] })
		return err
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	resp := &api.GCResponse{Released: []api.Endpoint{}, Retained: []string{}}
	for _, e := range released {
		resp.Released = append(resp.Released, toAPI(e))
	}
	for _, e := range retained {
		resp.Retained = append(resp.Retained, e.HostIfName)
	}
	if n := len(resp.Released); n > 0 {
		s.log.Info("GC released stale endpoints", "count", n)
	}
	return resp, nil
}

// PodList is the node's pods as one list request to the API server
// returned them, and the store revision read just before that request was
// sent. The list is what the orphan reconcile judges endpoints by
// (Orphaned); the revision is what tells it which endpoints the list is
// allowed to judge.
type PodList struct {
	// Revision is Service.Revision as read before the list was requested:
	// every endpoint created at or before it existed before the list was
	// taken, so its pod, created before its ADD, is in the list unless it
	// has been deleted.
	Revision uint64
	// Pods are the pods bound to this node. The list must be complete
	// (a consistent list, not a cache that may lag the API server) and
	// hold every phase, terminated pods included.
	Pods []Pod
}

// Pod is what the orphan reconcile needs to know of a pod.
type Pod struct {
	Namespace, Name, UID string
	// Pending is true while the pod's phase is Pending: its sandbox may
	// be being wired right now.
	Pending bool
	// IPs are the pod's status.podIPs: empty until the kubelet has written
	// the pod's network status.
	IPs []netip.Addr
}

// Revision returns the revision of the store's last committed write. Read
// it just before requesting the pod list of a PodList.
func (s *Service) Revision() uint64 {
	return store.Revision(s.store.ReadTxn(), "")
}

// Orphaned returns the orphan test of list: it selects an endpoint only
// when no pod with its UID exists according to a list observed after the
// endpoint was created. It never selects
//
//   - an endpoint created after the list was requested (its pod may be
//     missing from the list only because the list is older);
//   - an endpoint without a pod UID when a pod of its namespace and name
//     exists (a runtime that does not pass K8S_POD_UID leaves the name as
//     the only identity);
//   - an endpoint whose pod's name is taken by a pod that is Pending, has
//     no network status yet, or reports one of the endpoint's addresses:
//     a StatefulSet pod re-created under the same name may be mid-ADD, and
//     a static pod's mirror has another UID than the kubelet passes to CNI
//     (seed 001: whereabouts freed the address of a pod whose IP was not
//     yet in its status).
//
// Phase and addresses never make an endpoint an orphan; only the absence
// of its pod does.
func Orphaned(list PodList) func(*store.Endpoint) bool {
	uids := make(map[string]bool, len(list.Pods))
	byName := make(map[[2]string][]*Pod, len(list.Pods))
	for i := range list.Pods {
		p := &list.Pods[i]
		uids[p.UID] = true
		k := [2]string{p.Namespace, p.Name}
		byName[k] = append(byName[k], p)
	}
	return func(e *store.Endpoint) bool {
		switch {
		case e.CreateRevision == 0 || e.CreateRevision > list.Revision:
			return false
		case e.Pod.UID == "" && e.Pod.Name == "":
			return false // no pod identity: only CNI GC can tell
		case e.Pod.UID != "" && uids[e.Pod.UID]:
			return false
		}
		for _, p := range byName[[2]string{e.Pod.Namespace, e.Pod.Name}] {
			if e.Pod.UID == "" || p.Pending || len(p.IPs) == 0 || holdsAny(e, p.IPs) {
				return false
			}
		}
		return true
	}
}

func holdsAny(e *store.Endpoint, ips []netip.Addr) bool {
	for _, a := range e.Addresses {
		for _, ip := range ips {
			if a.Addr == ip.Unmap() {
				return true
			}
		}
	}
	return false
}

// ReleaseOrphans releases, in one durable transaction, every endpoint
// Orphaned(list) selects, except ADDs in flight, and returns them.
func (s *Service) ReleaseOrphans(ctx context.Context, list PodList) ([]api.Endpoint, error) {
	orphaned := Orphaned(list)
	var released []*store.Endpoint
	err := s.write(ctx, func(txn *store.Txn) (err error) {
		released, _, err = s.ReleaseTxn(txn, orphaned)
		return err
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	out := make([]api.Endpoint, 0, len(released))
	for _, e := range released {
		s.log.Info("released the addresses of an endpoint whose pod is gone",
			"container", e.ContainerID, "ifname", e.IfName,
			"pod", e.Pod.Namespace+"/"+e.Pod.Name, "uid", e.Pod.UID, "addresses", e.Addresses,
			"why", "no pod with its UID is bound to this node in a pod list requested after the endpoint was created")
		out = append(out, toAPI(e))
	}
	return out, nil
}
