package store

import (
	"reflect"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Objects is a complete set of Kubernetes objects from one source (a
// manifests directory, or the API server's informers). EndpointSlices are
// not among them: in standalone mode the agent computes them from the
// store (agent/endpointslice), so they have a replace of their own,
// ReplaceEndpointSlices.
type Objects struct {
	Namespaces []*policyapi.Namespace
	Pods       []*policyapi.Pod
	Policies   []*policyapi.NetworkPolicy
	Services   []*policyapi.Service
}

// ReplaceObjects makes the store's namespaces, pods, policies and Services
// exactly objs, inside txn: objects that are equal are left alone (no
// identity or selector churn), new and changed ones are upserted, missing
// ones deleted.
// Namespaces are written first and deleted last, so every pod is
// identified with its namespace's final labels. It reports whether
// anything changed.
func ReplaceObjects(txn *Txn, objs Objects) (bool, error) {
	changed := false
	oldNS, err := Namespaces(txn, nil)
	if err != nil {
		return false, err
	}
	keepNS := map[string]bool{}
	for _, ns := range objs.Namespaces {
		keepNS[ns.Name] = true
		old, err := NamespaceByName(txn, nil, ns.Name)
		if err != nil {
			return false, err
		}
		if old != nil && reflect.DeepEqual(old, ns) {
			continue
		}
		if err := UpsertNamespace(txn, ns); err != nil {
			return false, err
		}
		changed = true
	}

	oldPods, err := Pods(txn, nil)
	if err != nil {
		return false, err
	}
	keepPods := map[[2]string]bool{}
	for _, p := range objs.Pods {
		keepPods[[2]string{p.Namespace, p.Name}] = true
		old, err := PodByName(txn, nil, p.Namespace, p.Name)
		if err != nil {
			return false, err
		}
		if old != nil && reflect.DeepEqual(old.Object, p) {
			continue
		}
		if err := UpsertPod(txn, p); err != nil {
			return false, err
		}
		changed = true
	}
	for _, p := range oldPods {
		if !keepPods[[2]string{p.Namespace, p.Name}] {
			if err := DeletePod(txn, p.Namespace, p.Name); err != nil {
				return false, err
			}
			changed = true
		}
	}

	oldPolicies, err := Policies(txn, nil)
	if err != nil {
		return false, err
	}
	keepPolicies := map[[2]string]bool{}
	for _, np := range objs.Policies {
		keepPolicies[[2]string{np.Namespace, np.Name}] = true
		old, err := PolicyByName(txn, nil, np.Namespace, np.Name)
		if err != nil {
			return false, err
		}
		if old != nil && reflect.DeepEqual(old, np) {
			continue
		}
		if err := UpsertPolicy(txn, np); err != nil {
			return false, err
		}
		changed = true
	}
	for _, np := range oldPolicies {
		if !keepPolicies[[2]string{np.Namespace, np.Name}] {
			if err := DeletePolicy(txn, np.Namespace, np.Name); err != nil {
				return false, err
			}
			changed = true
		}
	}

	oldServices, err := Services(txn, nil)
	if err != nil {
		return false, err
	}
	keepServices := map[[2]string]bool{}
	for _, svc := range objs.Services {
		keepServices[[2]string{svc.Namespace, svc.Name}] = true
		old, err := ServiceByName(txn, nil, svc.Namespace, svc.Name)
		if err != nil {
			return false, err
		}
		if old != nil && reflect.DeepEqual(old.Object, svc) {
			continue
		}
		if err := UpsertService(txn, svc); err != nil {
			return false, err
		}
		changed = true
	}
	for _, svc := range oldServices {
		if !keepServices[[2]string{svc.Namespace, svc.Name}] {
			if err := DeleteService(txn, svc.Namespace, svc.Name); err != nil {
				return false, err
			}
			changed = true
		}
	}

	for _, ns := range oldNS {
		if !keepNS[ns.Name] {
			if err := DeleteNamespace(txn, ns.Name); err != nil {
				return false, err
			}
			changed = true
		}
	}
	return changed, nil
}
