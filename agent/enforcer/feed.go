package enforcer

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// podRef names a pod by namespace and name, as the store keys it.
type podRef struct{ ns, name string }

// feeder keeps an incremental compiler in step with the store: it hands
// the compiler the objects that changed since the revision it last saw,
// read from the store's change log, or every object when the log does
// not reach back that far.
type feeder struct {
	comp *policy.Incremental
	// rev is the store revision comp has seen; 0 with comp nil.
	rev uint64
	// localAddrs are the CNI addresses of the local pods as comp has them,
	// and localOps the OpID of each Ready endpoint by host interface (which
	// ADD wired it last), read with them.
	localAddrs map[podRef][]netip.Addr
	localOps   map[string]uint64
	// limits bound each namespace's policies (see policy.Limits), node
	// names this node (policy.Snapshot.Node), and nodePorts chooses among
	// its addresses; they outlive a reset.
	limits    policy.Limits
	node      string
	nodePorts NodePorts
}

// reset makes the next feed start over from the whole store.
func (f *feeder) reset() { *f = feeder{limits: f.limits, node: f.node, nodePorts: f.nodePorts} }

// feed brings the compiler to the revision txn reads. On error the
// compiler's inputs are in an unknown state, and the feeder resets.
func (f *feeder) feed(txn *store.Txn) (err error) {
	defer func() {
		if err != nil {
			f.reset()
		}
	}()
	rev := store.Revision(txn, "")
	if f.comp == nil {
		return f.feedAll(txn, rev)
	}
	changes, err := store.ChangesSince(txn, f.rev)
	if errors.Is(err, store.ErrChangesTrimmed) {
		return f.feedAll(txn, rev)
	}
	if err != nil {
		return err
	}
	// Local endpoints first: a pod changed in the same window is then fed
	// with its new CNI addresses.
	for _, c := range changes {
		if c.Table == store.TableEndpoints {
			if err := f.feedLocal(txn); err != nil {
				return err
			}
			break
		}
	}
	for _, c := range changes {
		f.feedChange(c)
	}
	f.rev = rev
	return nil
}

// feedChange hands the compiler one changed object.
func (f *feeder) feedChange(c store.Change) {
	obj := c.After
	if obj == nil {
		obj = c.Before
	}
	deleted := c.After == nil
	switch c.Table {
	case store.TableNamespaces:
		ns := obj.(*policyapi.Namespace)
		if deleted {
			f.comp.DeleteNamespace(ns.Name)
		} else {
			f.comp.SetNamespace(ns)
		}
	case store.TablePods:
		p := obj.(*store.Pod).Object
		if deleted {
			f.comp.DeletePod(p.Namespace, p.Name)
		} else {
			f.setPod(p)
		}
	case store.TablePolicies:
		np := obj.(*policyapi.NetworkPolicy)
		if deleted {
			f.comp.DeletePolicy(np.Namespace, np.Name)
		} else {
			f.comp.SetPolicy(np)
		}
	case store.TableIdentities:
		id := obj.(*store.Identity)
		if deleted {
			f.comp.DeleteIdentity(id.Key)
		} else {
			f.comp.SetIdentity(id.Key, id.ID)
		}
	case store.TableServices:
		svc := obj.(*store.Service).Object
		if deleted {
			f.comp.DeleteService(svc.Namespace, svc.Name)
		} else {
			f.comp.SetService(svc)
		}
	case store.TableEndpointSlices:
		sl := obj.(*store.EndpointSlice).Object
		if deleted {
			f.comp.DeleteEndpointSlice(sl.Namespace, sl.Name)
		} else {
			f.comp.SetEndpointSlice(sl)
		}
	case store.TableNodes:
		n := obj.(*policyapi.Node)
		switch {
		case n.Name != f.node:
		case deleted:
			f.comp.SetNodeInfo("", nil)
		default:
			f.comp.SetNodeInfo(n.Zone, f.nodePorts.Addrs(n.Addrs))
		}
	default:
		// Endpoints were read whole by feed; the rest is not policy input.
	}
}

// notCompilerInput are the store tables the compiler never reads: what a
// change to them does to the node's policy state is nothing. The
// compiler reads the Ready endpoints (feed, whole, when one changed) and
// the namespaces, pods, policies, identities, Services, EndpointSlices
// and this node's Node (feedChange); onlyReleases takes any table not
// listed here for policy input.
var notCompilerInput = map[string]bool{
	store.TablePools:       true,
	store.TableAllocations: true,
	store.TableBlocks:      true,
	store.TableCleanups:    true,
	store.TableSelectors:   true,
	store.TableRevisions:   true, // never in the change log
	store.TableChanges:     true, // the change log itself
}

// onlyReleases reports whether changes, at least one, only delete Ready
// endpoints (a DEL, a GC, an orphan clean-up), apart from changes the
// compiler does not see: the tables of notCompilerInput, and endpoints
// that are not Ready before or after (an ADD's reservation, a rolled
// back ADD). What they do to the compiled state is take away pods that
// are gone from the node: their entries, their CNI addresses and the
// rules that matched only them. A Ready endpoint that stays, or becomes
// Pending again (a repeated ADD re-wiring it), is not a release.
func onlyReleases(changes []store.Change) bool {
	released := false
	for _, c := range changes {
		switch {
		case notCompilerInput[c.Table]:
		case c.Table != store.TableEndpoints:
			return false
		case store.IsReadyEndpoint(c.Before) && c.After == nil:
			released = true
		case store.IsReadyEndpoint(c.Before) || store.IsReadyEndpoint(c.After):
			return false
		}
	}
	return released
}

// setPod hands the compiler p, with its CNI addresses if it is local.
func (f *feeder) setPod(p *policyapi.Pod) {
	if addrs, ok := f.localAddrs[podRef{p.Namespace, p.Name}]; ok {
		p = withAddrs(p, addrs)
	}
	f.comp.SetPod(p)
}

// feedLocal reads the Ready endpoints, hands them to the compiler, and
// hands it again every stored pod whose CNI addresses changed.
func (f *feeder) feedLocal(txn *store.Txn) error {
	local, addrs, ops, err := localEndpoints(txn)
	if err != nil {
		return err
	}
	f.comp.SetLocal(local)
	old := f.localAddrs
	f.localAddrs, f.localOps = addrs, ops
	for ref, a := range addrs {
		if b, ok := old[ref]; !ok || !slices.Equal(a, b) {
			if err := f.refeedPod(txn, ref); err != nil {
				return err
			}
		}
	}
	for ref := range old {
		if _, ok := addrs[ref]; !ok {
			if err := f.refeedPod(txn, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *feeder) refeedPod(txn *store.Txn, ref podRef) error {
	p, err := store.PodByName(txn, nil, ref.ns, ref.name)
	if err != nil {
		return err
	}
	if p != nil {
		f.setPod(p.Object)
	}
	return nil
}

// feedAll gives a new compiler every object of the store.
func (f *feeder) feedAll(txn *store.Txn, rev uint64) error {
	f.comp = policy.NewIncremental()
	f.comp.SetLimits(f.limits)
	f.comp.SetNode(f.node)
	if f.node != "" {
		n, err := store.NodeByName(txn, nil, f.node)
		if err != nil {
			return err
		}
		if n != nil {
			f.comp.SetNodeInfo(n.Zone, f.nodePorts.Addrs(n.Addrs))
		}
	}
	nss, err := store.Namespaces(txn, nil)
	if err != nil {
		return err
	}
	for _, ns := range nss {
		f.comp.SetNamespace(ns)
	}
	ids, err := store.Identities(txn, nil)
	if err != nil {
		return err
	}
	for _, id := range ids {
		f.comp.SetIdentity(id.Key, id.ID)
	}
	nps, err := store.Policies(txn, nil)
	if err != nil {
		return err
	}
	for _, np := range nps {
		f.comp.SetPolicy(np)
	}
	local, addrs, ops, err := localEndpoints(txn)
	if err != nil {
		return err
	}
	f.comp.SetLocal(local)
	f.localAddrs, f.localOps = addrs, ops
	pods, err := store.Pods(txn, nil)
	if err != nil {
		return err
	}
	for _, p := range pods {
		f.setPod(p)
	}
	svcs, err := store.Services(txn, nil)
	if err != nil {
		return err
	}
	for _, svc := range svcs {
		f.comp.SetService(svc)
	}
	sls, err := store.EndpointSlices(txn, nil)
	if err != nil {
		return err
	}
	for _, sl := range sls {
		f.comp.SetEndpointSlice(sl)
	}
	f.rev = rev
	return nil
}

// localEndpoints returns the Ready endpoints as the compiler's local
// endpoints, the CNI addresses of each pod they name, and the OpID of each
// by host interface.
func localEndpoints(txn *store.Txn) ([]policy.LocalEndpoint, map[podRef][]netip.Addr, map[string]uint64, error) {
	eps, err := store.EndpointsByState(txn, nil, store.EndpointReady)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read ready endpoints: %w", err)
	}
	local := make([]policy.LocalEndpoint, 0, len(eps))
	addrs := map[podRef][]netip.Addr{}
	ops := make(map[string]uint64, len(eps))
	for _, ep := range eps {
		ops[ep.HostIfName] = ep.OpID
		le := policy.LocalEndpoint{HostIfName: ep.HostIfName, Namespace: ep.Pod.Namespace, PodName: ep.Pod.Name}
		for _, a := range ep.Addresses {
			if a.Addr.Is4() {
				le.IPv4 = a.Addr
			} else {
				le.IPv6 = a.Addr
			}
			if ep.Pod.Name != "" {
				ref := podRef{ep.Pod.Namespace, ep.Pod.Name}
				addrs[ref] = append(addrs[ref], a.Addr)
			}
		}
		local = append(local, le)
	}
	return local, addrs, ops, nil
}

// withAddrs returns a copy of p whose status lists addrs, the addresses CNI
// gave the local pod; the stored object is left alone.
func withAddrs(p *policyapi.Pod, addrs []netip.Addr) *policyapi.Pod {
	c := *p
	c.Status.PodIP = ""
	c.Status.PodIPs = make([]policyapi.PodIP, len(addrs))
	for i, a := range addrs {
		c.Status.PodIPs[i] = policyapi.PodIP{IP: a.String()}
	}
	if len(addrs) > 0 {
		c.Status.PodIP = addrs[0].String()
	}
	return &c
}
