package store

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/go-memdb"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Pod is a pod known to the node, with the identity it holds a reference
// on. Objects are immutable once inserted.
type Pod struct {
	Object *policyapi.Pod
	// IdentityKey is the policyapi.IdentityKey the pod was counted under.
	IdentityKey string

	Revisions
}

// Identity is the numeric identity of one distinct pod label set (see
// policyapi.IdentityKey). Refs counts the pods holding it; the row exists
// exactly as long as Refs > 0, in every committed state.
type Identity struct {
	ID   policyapi.Peer
	Key  string
	Refs int

	Revisions
}

// Selector is a label selector some committed policy refers to (the
// policy's podSelector or a peer's selectors), keyed by its canonical form
// and scope. Refs counts the references; the row exists exactly as long as
// Refs > 0. Backends that materialise selectors (ipsets, HNS SetPolicies)
// create and destroy them from this table.
type Selector struct {
	Key string
	// Namespace scopes a podSelector without namespaceSelector to the
	// policy's namespace; "" when NS is set.
	Namespace string
	Pod, NS   *policyapi.LabelSelector
	Refs      int

	Revisions
}

// namespaceKey, podKey and policyKey identify namespaced objects.
func nsNameKey(ns, name string) []byte { return keyBuilder{}.str(ns).str(name) }

func namespacesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableNamespaces, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*policyapi.Namespace]{
			key:  func(n *policyapi.Namespace) ([]byte, bool) { return keyBuilder{}.str(n.Name), true },
			args: stringArgs(1),
		}},
	}}
}

func podsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TablePods, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Pod]{
			key:  func(p *Pod) ([]byte, bool) { return nsNameKey(p.Object.Namespace, p.Object.Name), true },
			args: stringArgs(2),
		}},
		IndexIdentity: {Name: IndexIdentity, Indexer: keyIndex[*Pod]{
			key:  func(p *Pod) ([]byte, bool) { return keyBuilder{}.str(p.IdentityKey), true },
			args: stringArgs(1),
		}},
	}}
}

func policiesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TablePolicies, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*policyapi.NetworkPolicy]{
			key:  func(p *policyapi.NetworkPolicy) ([]byte, bool) { return nsNameKey(p.Namespace, p.Name), true },
			args: stringArgs(2),
		}},
	}}
}

func identitiesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableIdentities, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Identity]{
			key:  func(i *Identity) ([]byte, bool) { return peerKey(i.ID), true },
			args: peerArgs,
		}},
		IndexKey: {Name: IndexKey, Unique: true, Indexer: keyIndex[*Identity]{
			key:  func(i *Identity) ([]byte, bool) { return keyBuilder{}.str(i.Key), true },
			args: stringArgs(1),
		}},
	}}
}

func selectorsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableSelectors, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Selector]{
			key:  func(s *Selector) ([]byte, bool) { return keyBuilder{}.str(s.Key), true },
			args: stringArgs(1),
		}},
	}}
}

// peerKey encodes an identity big-endian so index order is numeric order.
func peerKey(p policyapi.Peer) []byte {
	return []byte{byte(p >> 24), byte(p >> 16), byte(p >> 8), byte(p)}
}

func peerArgs(_ bool, args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("index needs one policyapi.Peer argument, got %d", len(args))
	}
	p, ok := args[0].(policyapi.Peer)
	if !ok {
		return nil, fmt.Errorf("index argument 0: got %T, want policyapi.Peer", args[0])
	}
	return peerKey(p), nil
}

// UpsertNamespace inserts or replaces a namespace. Its pods' identities
// depend on its labels, so they are re-counted in the same transaction.
func UpsertNamespace(txn *Txn, ns *policyapi.Namespace) error {
	if err := txn.touch(TableNamespaces); err != nil {
		return err
	}
	if err := txn.insert(TableNamespaces, ns); err != nil {
		return fmt.Errorf("insert namespace %s: %w", ns.Name, err)
	}
	return reidentifyNamespace(txn, ns.Name)
}

// DeleteNamespace removes a namespace (its pods stay, with the labels the
// API server gives every namespace).
func DeleteNamespace(txn *Txn, name string) error {
	if err := txn.touch(TableNamespaces); err != nil {
		return err
	}
	if _, err := txn.deleteAll(TableNamespaces, IndexID, name); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return reidentifyNamespace(txn, name)
}

// NamespaceByName returns a namespace or nil.
func NamespaceByName(txn *Txn, ws memdb.WatchSet, name string) (*policyapi.Namespace, error) {
	return first[*policyapi.Namespace](txn, ws, TableNamespaces, IndexID, name)
}

// Namespaces lists every namespace.
func Namespaces(txn *Txn, ws memdb.WatchSet) ([]*policyapi.Namespace, error) {
	return collect[*policyapi.Namespace](txn, ws, TableNamespaces, IndexID)
}

func reidentifyNamespace(txn *Txn, ns string) error {
	it, err := txn.get(TablePods, IndexID+"_prefix", ns)
	if err != nil {
		return fmt.Errorf("list pods of namespace %s: %w", ns, err)
	}
	var pods []*Pod
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if p := raw.(*Pod); p.Object.Namespace == ns {
			pods = append(pods, p)
		}
	}
	for _, p := range pods {
		if err := UpsertPod(txn, p.Object); err != nil {
			return err
		}
	}
	return nil
}

// UpsertPod inserts or replaces a pod and moves its identity reference:
// the new identity is taken (created if needed) before the old one is
// released (deleted when that was its last reference), all in txn.
func UpsertPod(txn *Txn, pod *policyapi.Pod) error {
	if err := txn.touch(TablePods); err != nil {
		return err
	}
	old, err := PodByName(txn, nil, pod.Namespace, pod.Name)
	if err != nil {
		return err
	}
	ns, err := NamespaceByName(txn, nil, pod.Namespace)
	if err != nil {
		return err
	}
	key := policyapi.IdentityKey(ns, pod)
	if err := acquireIdentity(txn, key); err != nil {
		return err
	}
	if old != nil {
		if err := releaseIdentity(txn, old.IdentityKey); err != nil {
			return err
		}
	}
	p := &Pod{Object: pod, IdentityKey: key}
	if old != nil {
		p.Revisions = old.Revisions
	}
	p.stamp(txn.rev)
	if err := txn.insert(TablePods, p); err != nil {
		return fmt.Errorf("insert pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// DeletePod removes a pod and releases its identity. Deleting an unknown
// pod is not an error.
func DeletePod(txn *Txn, namespace, name string) error {
	old, err := PodByName(txn, nil, namespace, name)
	if err != nil || old == nil {
		return err
	}
	if err := txn.touch(TablePods); err != nil {
		return err
	}
	if err := txn.delete(TablePods, old); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	return releaseIdentity(txn, old.IdentityKey)
}

// PodByName returns a pod or nil.
func PodByName(txn *Txn, ws memdb.WatchSet, namespace, name string) (*Pod, error) {
	return first[*Pod](txn, ws, TablePods, IndexID, namespace, name)
}

// Pods lists every pod object.
func Pods(txn *Txn, ws memdb.WatchSet) ([]*policyapi.Pod, error) {
	rows, err := collect[*Pod](txn, ws, TablePods, IndexID)
	if err != nil {
		return nil, err
	}
	out := make([]*policyapi.Pod, len(rows))
	for i, r := range rows {
		out[i] = r.Object
	}
	return out, nil
}

// PodsByIdentityKey lists the pods holding an identity.
func PodsByIdentityKey(txn *Txn, ws memdb.WatchSet, key string) ([]*Pod, error) {
	return collect[*Pod](txn, ws, TablePods, IndexIdentity, key)
}

func acquireIdentity(txn *Txn, key string) error {
	id, err := first[*Identity](txn, nil, TableIdentities, IndexKey, key)
	if err != nil {
		return err
	}
	next := &Identity{Key: key, Refs: 1}
	if id != nil {
		c := *id
		c.Refs++
		next = &c
	} else {
		last, err := txn.last(TableIdentities, IndexID)
		if err != nil {
			return fmt.Errorf("find highest identity: %w", err)
		}
		next.ID = policyapi.FirstPodIdentity
		if last != nil {
			next.ID = last.(*Identity).ID + 1
		}
		if next.ID&policyapi.CIDRClassBit != 0 {
			return fmt.Errorf("allocate identity for %q: identity space exhausted", key)
		}
	}
	return insertIdentity(txn, next)
}

func releaseIdentity(txn *Txn, key string) error {
	id, err := first[*Identity](txn, nil, TableIdentities, IndexKey, key)
	if err != nil {
		return err
	}
	if id == nil {
		return fmt.Errorf("release identity %q: %w", key, ErrNotFound)
	}
	if err := txn.touch(TableIdentities); err != nil {
		return err
	}
	if id.Refs <= 1 {
		if err := txn.delete(TableIdentities, id); err != nil {
			return fmt.Errorf("delete identity %d: %w", id.ID, err)
		}
		return nil
	}
	c := *id
	c.Refs--
	return insertIdentity(txn, &c)
}

func insertIdentity(txn *Txn, id *Identity) error {
	if err := txn.touch(TableIdentities); err != nil {
		return err
	}
	id.stamp(txn.rev)
	if err := txn.insert(TableIdentities, id); err != nil {
		return fmt.Errorf("insert identity %d: %w", id.ID, err)
	}
	return nil
}

// Identities lists every identity in numeric order.
func Identities(txn *Txn, ws memdb.WatchSet) ([]*Identity, error) {
	return collect[*Identity](txn, ws, TableIdentities, IndexID)
}

// IdentityByID returns the identity of a number or nil: one index
// lookup, for naming a peer (a verdict event carries the number).
func IdentityByID(txn *Txn, ws memdb.WatchSet, id policyapi.Peer) (*Identity, error) {
	return first[*Identity](txn, ws, TableIdentities, IndexID, id)
}

// IdentityByKey returns an identity or nil.
func IdentityByKey(txn *Txn, ws memdb.WatchSet, key string) (*Identity, error) {
	return first[*Identity](txn, ws, TableIdentities, IndexKey, key)
}

// UpsertPolicy inserts or replaces a NetworkPolicy. The selectors it refers
// to are counted before the ones of the version it replaces are released,
// so a selector both versions use never leaves the table.
func UpsertPolicy(txn *Txn, np *policyapi.NetworkPolicy) error {
	if err := txn.touch(TablePolicies); err != nil {
		return err
	}
	old, err := PolicyByName(txn, nil, np.Namespace, np.Name)
	if err != nil {
		return err
	}
	for _, s := range policySelectors(np) {
		if err := acquireSelector(txn, s); err != nil {
			return err
		}
	}
	if old != nil {
		for _, s := range policySelectors(old) {
			if err := releaseSelector(txn, s.Key); err != nil {
				return err
			}
		}
	}
	if err := txn.insert(TablePolicies, np); err != nil {
		return fmt.Errorf("insert policy %s/%s: %w", np.Namespace, np.Name, err)
	}
	return nil
}

// DeletePolicy removes a NetworkPolicy and releases its selectors. Deleting
// an unknown policy is not an error.
func DeletePolicy(txn *Txn, namespace, name string) error {
	old, err := PolicyByName(txn, nil, namespace, name)
	if err != nil || old == nil {
		return err
	}
	if err := txn.touch(TablePolicies); err != nil {
		return err
	}
	if err := txn.delete(TablePolicies, old); err != nil {
		return fmt.Errorf("delete policy %s/%s: %w", namespace, name, err)
	}
	for _, s := range policySelectors(old) {
		if err := releaseSelector(txn, s.Key); err != nil {
			return err
		}
	}
	return nil
}

// PolicyByName returns a policy or nil.
func PolicyByName(txn *Txn, ws memdb.WatchSet, namespace, name string) (*policyapi.NetworkPolicy, error) {
	return first[*policyapi.NetworkPolicy](txn, ws, TablePolicies, IndexID, namespace, name)
}

// Policies lists every NetworkPolicy.
func Policies(txn *Txn, ws memdb.WatchSet) ([]*policyapi.NetworkPolicy, error) {
	return collect[*policyapi.NetworkPolicy](txn, ws, TablePolicies, IndexID)
}

// Selectors lists every referenced selector.
func Selectors(txn *Txn, ws memdb.WatchSet) ([]*Selector, error) {
	return collect[*Selector](txn, ws, TableSelectors, IndexID)
}

// SelectorByKey returns a selector or nil.
func SelectorByKey(txn *Txn, ws memdb.WatchSet, key string) (*Selector, error) {
	return first[*Selector](txn, ws, TableSelectors, IndexID, key)
}

// policySelectors lists the selectors np refers to, one per reference.
func policySelectors(np *policyapi.NetworkPolicy) []*Selector {
	out := []*Selector{newSelector(np.Namespace, &np.Spec.PodSelector, nil)}
	peers := func(ps []policyapi.NetworkPolicyPeer) {
		for _, p := range ps {
			if p.PodSelector == nil && p.NamespaceSelector == nil {
				continue
			}
			scope := np.Namespace
			if p.NamespaceSelector != nil {
				scope = ""
			}
			out = append(out, newSelector(scope, p.PodSelector, p.NamespaceSelector))
		}
	}
	for _, r := range np.Spec.Ingress {
		peers(r.From)
	}
	for _, r := range np.Spec.Egress {
		peers(r.To)
	}
	return out
}

func newSelector(scope string, pod, ns *policyapi.LabelSelector) *Selector {
	// encoding/json writes map keys sorted, so equal selectors encode
	// equally.
	b, _ := json.Marshal(struct {
		Namespace string                   `json:"n,omitempty"`
		Pod       *policyapi.LabelSelector `json:"p,omitempty"`
		NS        *policyapi.LabelSelector `json:"ns,omitempty"`
	}{scope, pod, ns})
	return &Selector{Key: string(b), Namespace: scope, Pod: pod, NS: ns}
}

func acquireSelector(txn *Txn, s *Selector) error {
	old, err := SelectorByKey(txn, nil, s.Key)
	if err != nil {
		return err
	}
	next := *s
	next.Refs = 1
	if old != nil {
		next = *old
		next.Refs++
	}
	return insertSelector(txn, &next)
}

func releaseSelector(txn *Txn, key string) error {
	old, err := SelectorByKey(txn, nil, key)
	if err != nil {
		return err
	}
	if old == nil {
		return fmt.Errorf("release selector %s: %w", key, ErrNotFound)
	}
	if err := txn.touch(TableSelectors); err != nil {
		return err
	}
	if old.Refs <= 1 {
		if err := txn.delete(TableSelectors, old); err != nil {
			return fmt.Errorf("delete selector %s: %w", key, err)
		}
		return nil
	}
	next := *old
	next.Refs--
	return insertSelector(txn, &next)
}

func insertSelector(txn *Txn, s *Selector) error {
	if err := txn.touch(TableSelectors); err != nil {
		return err
	}
	s.stamp(txn.rev)
	if err := txn.insert(TableSelectors, s); err != nil {
		return fmt.Errorf("insert selector %s: %w", s.Key, err)
	}
	return nil
}

func first[T any](txn *Txn, ws memdb.WatchSet, table, index string, args ...any) (T, error) {
	var zero T
	ch, raw, err := txn.firstWatch(table, index, args...)
	if err != nil {
		return zero, fmt.Errorf("look up %s by %s: %w", table, index, err)
	}
	ws.Add(ch)
	if raw == nil {
		return zero, nil
	}
	return raw.(T), nil
}
