package types

// UID is an object's unique identity, set by the API server at creation;
// an object re-created under the same name has another.
type UID string

// NamespacedName is an object's namespace and name.
type NamespacedName struct {
	Namespace string
	Name      string
}

// String returns "namespace/name", or the name of a cluster-scoped object.
func (n NamespacedName) String() string {
	if n.Namespace == "" {
		return n.Name
	}
	return n.Namespace + "/" + n.Name
}

// PatchType is the content type of a PATCH request's body.
type PatchType string

// The patch types the API server accepts.
const (
	JSONPatchType           PatchType = "application/json-patch+json"
	MergePatchType          PatchType = "application/merge-patch+json"
	StrategicMergePatchType PatchType = "application/strategic-merge-patch+json"
	ApplyPatchType          PatchType = "application/apply-patch+yaml"
)
