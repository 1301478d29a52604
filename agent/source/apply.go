package source

import (
	"log/slog"
	"reflect"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// batch is the keys of the objects that changed since the last commit, by
// kind: namespaces by name, the namespaced kinds by namespace/name.
type batch struct {
	keys [numKinds][]string
}

func (b *batch) empty() bool {
	for _, keys := range b.keys {
		if len(keys) > 0 {
			return false
		}
	}
	return true
}

// lookupFunc returns the current object of kind k under key, and false
// when there is none (it was deleted).
type lookupFunc func(k kind, key string) (any, bool)

// converter turns informer objects into policy objects for the agent of
// node. An object it cannot convert is left out of the store, as if it
// did not exist, and logged; except a NetworkPolicy, which is stored as
// converted for the compiler to fail closed (see ConvertNetworkPolicy).
type converter struct {
	node string
	log  *slog.Logger
}

func (c converter) namespace(obj any) *policyapi.Namespace {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil
	}
	out, err := ConvertNamespace(ns)
	if err != nil {
		c.log.Warn("namespace left out of policy", "namespace", ns.Name, "err", err)
		return nil
	}
	return out
}

func (c converter) pod(obj any) *policyapi.Pod {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	out, err := ConvertPod(pod, c.node)
	if err != nil {
		c.log.Warn("pod left out of policy", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return nil
	}
	return out
}

func (c converter) service(obj any) *policyapi.Service {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	out, err := ConvertService(svc)
	if err != nil {
		c.log.Error("service cannot be translated and is left out", "service", svc.Namespace+"/"+svc.Name, "err", err)
		return nil
	}
	return out
}

func (c converter) endpointSlice(obj any) *policyapi.EndpointSlice {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil
	}
	out, err := ConvertEndpointSlice(s)
	if err != nil {
		c.log.Error("endpoint slice cannot be read and is left out", "endpointslice", s.Namespace+"/"+s.Name, "err", err)
		return nil
	}
	return out
}

func (c converter) policy(obj any) *policyapi.NetworkPolicy {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return nil
	}
	out, err := ConvertNetworkPolicy(np)
	if err != nil {
		// Stored all the same: the compiler fails it closed.
		c.log.Error("network policy cannot be enforced as written; the pods it selects fail closed", "policy", np.Namespace+"/"+np.Name, "err", err)
	}
	return out
}

// apply writes the current state of b's objects into txn: namespaces
// first (so pods are identified with their namespace's final labels), then
// pods, policies, Services and EndpointSlices, then namespace deletions.
// Objects equal to what the store holds are not rewritten. It reports
// whether anything changed.
func (b *batch) apply(txn *store.Txn, lookup lookupFunc, conv converter) (bool, error) {
	changed := false
	var goneNS []string
	for _, key := range b.keys[kindNamespace] {
		obj, ok := lookup(kindNamespace, key)
		var ns *policyapi.Namespace
		if ok {
			ns = conv.namespace(obj)
		}
		if ns == nil {
			goneNS = append(goneNS, key)
			continue
		}
		old, err := store.NamespaceByName(txn, nil, ns.Name)
		if err != nil {
			return false, err
		}
		if old != nil && reflect.DeepEqual(old, ns) {
			continue
		}
		if err := store.UpsertNamespace(txn, ns); err != nil {
			return false, err
		}
		changed = true
	}
	for _, key := range b.keys[kindPod] {
		namespace, name, err := client.SplitKey(key)
		if err != nil {
			return false, err
		}
		old, err := store.PodByName(txn, nil, namespace, name)
		if err != nil {
			return false, err
		}
		var pod *policyapi.Pod
		if obj, ok := lookup(kindPod, key); ok {
			pod = conv.pod(obj)
		}
		switch {
		case pod == nil && old == nil:
		case pod == nil:
			if err := store.DeletePod(txn, namespace, name); err != nil {
				return false, err
			}
			changed = true
		case old == nil || !reflect.DeepEqual(old.Object, pod):
			if err := store.UpsertPod(txn, pod); err != nil {
				return false, err
			}
			changed = true
		}
	}
	for _, key := range b.keys[kindPolicy] {
		namespace, name, err := client.SplitKey(key)
		if err != nil {
			return false, err
		}
		old, err := store.PolicyByName(txn, nil, namespace, name)
		if err != nil {
			return false, err
		}
		var np *policyapi.NetworkPolicy
		if obj, ok := lookup(kindPolicy, key); ok {
			np = conv.policy(obj)
		}
		switch {
		case np == nil && old == nil:
		case np == nil:
			if err := store.DeletePolicy(txn, namespace, name); err != nil {
				return false, err
			}
			changed = true
		case old == nil || !reflect.DeepEqual(old, np):
			if err := store.UpsertPolicy(txn, np); err != nil {
				return false, err
			}
			changed = true
		}
	}
	svcChanged, err := b.applyServices(txn, lookup, conv)
	if err != nil {
		return false, err
	}
	changed = changed || svcChanged
	for _, name := range goneNS {
		old, err := store.NamespaceByName(txn, nil, name)
		if err != nil {
			return false, err
		}
		if old == nil {
			continue
		}
		if err := store.DeleteNamespace(txn, name); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// applyServices writes the current state of b's Services and
// EndpointSlices into txn, as apply does the other kinds.
func (b *batch) applyServices(txn *store.Txn, lookup lookupFunc, conv converter) (bool, error) {
	changed := false
	for _, key := range b.keys[kindService] {
		namespace, name, err := client.SplitKey(key)
		if err != nil {
			return false, err
		}
		old, err := store.ServiceByName(txn, nil, namespace, name)
		if err != nil {
			return false, err
		}
		var svc *policyapi.Service
		if obj, ok := lookup(kindService, key); ok {
			svc = conv.service(obj)
		}
		switch {
		case svc == nil && old == nil:
		case svc == nil:
			if err := store.DeleteService(txn, namespace, name); err != nil {
				return false, err
			}
			changed = true
		case old == nil || !reflect.DeepEqual(old.Object, svc):
			if err := store.UpsertService(txn, svc); err != nil {
				return false, err
			}
			changed = true
		}
	}
	for _, key := range b.keys[kindEndpointSlice] {
		namespace, name, err := client.SplitKey(key)
		if err != nil {
			return false, err
		}
		old, err := store.EndpointSliceByName(txn, nil, namespace, name)
		if err != nil {
			return false, err
		}
		var sl *policyapi.EndpointSlice
		if obj, ok := lookup(kindEndpointSlice, key); ok {
			sl = conv.endpointSlice(obj)
		}
		switch {
		case sl == nil && old == nil:
		case sl == nil:
			if err := store.DeleteEndpointSlice(txn, namespace, name); err != nil {
				return false, err
			}
			changed = true
		case old == nil || !reflect.DeepEqual(old.Object, sl):
			if err := store.UpsertEndpointSlice(txn, sl); err != nil {
				return false, err
			}
			changed = true
		}
	}
	return changed, nil
}

// objects converts everything the informers hold: the objects
// ReplaceObjects takes, and the EndpointSlices.
func (s *Source) objects() (store.Objects, []*policyapi.EndpointSlice) {
	conv := s.converter()
	var out store.Objects
	for _, obj := range s.informers[kindNamespace].List() {
		if ns := conv.namespace(obj); ns != nil {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	for _, obj := range s.informers[kindPod].List() {
		if p := conv.pod(obj); p != nil {
			out.Pods = append(out.Pods, p)
		}
	}
	for _, obj := range s.informers[kindPolicy].List() {
		if np := conv.policy(obj); np != nil {
			out.Policies = append(out.Policies, np)
		}
	}
	for _, obj := range s.informers[kindService].List() {
		if svc := conv.service(obj); svc != nil {
			out.Services = append(out.Services, svc)
		}
	}
	var slices []*policyapi.EndpointSlice
	for _, obj := range s.informers[kindEndpointSlice].List() {
		if sl := conv.endpointSlice(obj); sl != nil {
			slices = append(slices, sl)
		}
	}
	return out, slices
}

func (s *Source) converter() converter { return converter{node: s.opts.NodeName, log: s.log} }

// lookup reads an object from its informer's cache.
func (s *Source) lookup(k kind, key string) (any, bool) {
	return s.informers[k].Get(key)
}

// publishNodesIfDirty calls OnNodes when a Node or NodeIPAM changed since
// the last call.
func (s *Source) publishNodesIfDirty() {
	s.mu.Lock()
	dirty := s.nodesDirty
	s.nodesDirty = false
	s.mu.Unlock()
	if dirty {
		s.publishNodes()
	}
}

// publishNodes hands the current nodes' view to OnNodes.
func (s *Source) publishNodes() {
	if s.opts.OnNodes == nil {
		return
	}
	s.mu.Lock()
	s.nodesDirty = false
	s.mu.Unlock()
	var nodes []*corev1.Node
	for _, obj := range s.nodes.List() {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	var ipams []*v1alpha1.NodeIPAM
	for _, obj := range s.ipams.List() {
		if n, ok := obj.(*v1alpha1.NodeIPAM); ok {
			ipams = append(ipams, n)
		}
	}
	slices.SortFunc(ipams, func(a, b *v1alpha1.NodeIPAM) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	view := NodesView(s.opts.NodeName, nodes, ipams)
	for _, p := range view.Problems {
		s.log.Warn("node left out of routing", "problem", p)
	}
	s.opts.OnNodes(view)
}
