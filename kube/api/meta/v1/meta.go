package v1

import (
	"encoding/json"

	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/api/types"
)

// TypeMeta is an object's apiVersion and kind.
type TypeMeta struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
}

// GetObjectKind returns the object's TypeMeta.
func (t *TypeMeta) GetObjectKind() schema.ObjectKind { return t }

// GroupVersionKind returns the kind named by the object's TypeMeta.
func (t *TypeMeta) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(t.APIVersion, t.Kind)
}

// SetGroupVersionKind sets the object's TypeMeta.
func (t *TypeMeta) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	t.APIVersion, t.Kind = gvk.ToAPIVersionAndKind()
}

// ObjectMeta is the metadata of an object. All its fields are declared, so
// that an object read and written back loses none.
type ObjectMeta struct {
	Name                       string               `json:"name,omitempty"`
	GenerateName               string               `json:"generateName,omitempty"`
	Namespace                  string               `json:"namespace,omitempty"`
	SelfLink                   string               `json:"selfLink,omitempty"`
	UID                        types.UID            `json:"uid,omitempty"`
	ResourceVersion            string               `json:"resourceVersion,omitempty"`
	Generation                 int64                `json:"generation,omitempty"`
	CreationTimestamp          Time                 `json:"creationTimestamp,omitzero"`
	DeletionTimestamp          *Time                `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64               `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string    `json:"labels,omitempty"`
	Annotations                map[string]string    `json:"annotations,omitempty"`
	OwnerReferences            []OwnerReference     `json:"ownerReferences,omitempty"`
	Finalizers                 []string             `json:"finalizers,omitempty"`
	ManagedFields              []ManagedFieldsEntry `json:"managedFields,omitempty"`
}

// OwnerReference names an object that owns this one; the garbage collector
// deletes an object whose owners are all gone.
type OwnerReference struct {
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Name               string    `json:"name"`
	UID                types.UID `json:"uid"`
	Controller         *bool     `json:"controller,omitempty"`
	BlockOwnerDeletion *bool     `json:"blockOwnerDeletion,omitempty"`
}

// ManagedFieldsEntry is one field manager's record of the fields it set;
// lockstep keeps it as read.
type ManagedFieldsEntry struct {
	Manager     string          `json:"manager,omitempty"`
	Operation   string          `json:"operation,omitempty"`
	APIVersion  string          `json:"apiVersion,omitempty"`
	Time        *Time           `json:"time,omitempty"`
	FieldsType  string          `json:"fieldsType,omitempty"`
	FieldsV1    json.RawMessage `json:"fieldsV1,omitempty"`
	Subresource string          `json:"subresource,omitempty"`
}

// ListMeta is the metadata of a list: the resourceVersion to watch from
// and the token of the next page.
type ListMeta struct {
	SelfLink           string `json:"selfLink,omitempty"`
	ResourceVersion    string `json:"resourceVersion,omitempty"`
	Continue           string `json:"continue,omitempty"`
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}

// GetResourceVersion returns the list's resourceVersion.
func (l *ListMeta) GetResourceVersion() string { return l.ResourceVersion }

// GetContinue returns the token of the next page, "" on the last.
func (l *ListMeta) GetContinue() string { return l.Continue }

// Object is the metadata every object has, read and set through its
// ObjectMeta.
type Object interface {
	GetNamespace() string
	SetNamespace(string)
	GetName() string
	SetName(string)
	GetUID() types.UID
	SetUID(types.UID)
	GetResourceVersion() string
	SetResourceVersion(string)
	GetGeneration() int64
	GetLabels() map[string]string
	SetLabels(map[string]string)
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
	GetDeletionTimestamp() *Time
	GetOwnerReferences() []OwnerReference
	SetOwnerReferences([]OwnerReference)
	GetManagedFields() []ManagedFieldsEntry
	SetManagedFields([]ManagedFieldsEntry)
}

// GetObjectMeta returns the metadata itself.
func (m *ObjectMeta) GetObjectMeta() Object { return m }

// GetNamespace returns the namespace.
func (m *ObjectMeta) GetNamespace() string { return m.Namespace }

// SetNamespace sets the namespace.
func (m *ObjectMeta) SetNamespace(ns string) { m.Namespace = ns }

// GetName returns the name.
func (m *ObjectMeta) GetName() string { return m.Name }

// SetName sets the name.
func (m *ObjectMeta) SetName(name string) { m.Name = name }

// GetUID returns the UID.
func (m *ObjectMeta) GetUID() types.UID { return m.UID }

// SetUID sets the UID.
func (m *ObjectMeta) SetUID(uid types.UID) { m.UID = uid }

// GetResourceVersion returns the resourceVersion.
func (m *ObjectMeta) GetResourceVersion() string { return m.ResourceVersion }

// SetResourceVersion sets the resourceVersion.
func (m *ObjectMeta) SetResourceVersion(rv string) { m.ResourceVersion = rv }

// GetGeneration returns the generation.
func (m *ObjectMeta) GetGeneration() int64 { return m.Generation }

// GetLabels returns the labels.
func (m *ObjectMeta) GetLabels() map[string]string { return m.Labels }

// SetLabels sets the labels.
func (m *ObjectMeta) SetLabels(l map[string]string) { m.Labels = l }

// GetAnnotations returns the annotations.
func (m *ObjectMeta) GetAnnotations() map[string]string { return m.Annotations }

// SetAnnotations sets the annotations.
func (m *ObjectMeta) SetAnnotations(a map[string]string) { m.Annotations = a }

// GetDeletionTimestamp returns the deletion time, nil while the object is not being deleted.
func (m *ObjectMeta) GetDeletionTimestamp() *Time { return m.DeletionTimestamp }

// GetOwnerReferences returns the owner references.
func (m *ObjectMeta) GetOwnerReferences() []OwnerReference { return m.OwnerReferences }

// SetOwnerReferences sets the owner references.
func (m *ObjectMeta) SetOwnerReferences(r []OwnerReference) { m.OwnerReferences = r }

// GetManagedFields returns the managed fields.
func (m *ObjectMeta) GetManagedFields() []ManagedFieldsEntry { return m.ManagedFields }

// SetManagedFields sets the managed fields.
func (m *ObjectMeta) SetManagedFields(f []ManagedFieldsEntry) { m.ManagedFields = f }

// GetControllerOfNoCopy returns the owner reference of obj that is its
// controller, or nil.
func GetControllerOfNoCopy(obj Object) *OwnerReference {
	refs := obj.GetOwnerReferences()
	for i := range refs {
		if c := refs[i].Controller; c != nil && *c {
			return &refs[i]
		}
	}
	return nil
}

// PartialObjectMetadata is an object of any kind read for its metadata
// only.
type PartialObjectMetadata struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
}

// WatchEvent is an event of a watch stream as it is sent.
type WatchEvent struct {
	Type   string               `json:"type"`
	Object runtime.RawExtension `json:"object"`
}
