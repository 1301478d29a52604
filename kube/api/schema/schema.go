package schema

import "strings"

// GroupVersion is an API group and version; the core group is "".
type GroupVersion struct {
	Group   string
	Version string
}

// String returns the apiVersion form: "v1" for the core group, else
// "group/version".
func (gv GroupVersion) String() string {
	if gv.Group == "" {
		return gv.Version
	}
	return gv.Group + "/" + gv.Version
}

// WithKind returns the kind kind of this group and version.
func (gv GroupVersion) WithKind(kind string) GroupVersionKind {
	return GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}
}

// WithResource returns the resource of this group and version.
func (gv GroupVersion) WithResource(resource string) GroupVersionResource {
	return GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: resource}
}

// ParseGroupVersion reads an apiVersion ("v1", "group/version").
func ParseGroupVersion(apiVersion string) GroupVersion {
	if group, version, ok := strings.Cut(apiVersion, "/"); ok {
		return GroupVersion{Group: group, Version: version}
	}
	return GroupVersion{Version: apiVersion}
}

// GroupVersionKind names a kind in a group and version.
type GroupVersionKind struct {
	Group   string
	Version string
	Kind    string
}

// GroupVersion drops the kind.
func (gvk GroupVersionKind) GroupVersion() GroupVersion {
	return GroupVersion{Group: gvk.Group, Version: gvk.Version}
}

// ToAPIVersionAndKind returns the TypeMeta fields of the kind.
func (gvk GroupVersionKind) ToAPIVersionAndKind() (string, string) {
	return gvk.GroupVersion().String(), gvk.Kind
}

// FromAPIVersionAndKind reads the TypeMeta fields of an object.
func FromAPIVersionAndKind(apiVersion, kind string) GroupVersionKind {
	return ParseGroupVersion(apiVersion).WithKind(kind)
}

// GroupVersionResource names a resource in a group and version.
type GroupVersionResource struct {
	Group    string
	Version  string
	Resource string
}

// GroupResource drops the version.
func (gvr GroupVersionResource) GroupResource() GroupResource {
	return GroupResource{Group: gvr.Group, Resource: gvr.Resource}
}

// GroupResource names a resource of a group, as API errors do.
type GroupResource struct {
	Group    string
	Resource string
}

// String returns "resource.group", or "resource" in the core group.
func (gr GroupResource) String() string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// ObjectKind is how an object's apiVersion and kind are read and set.
type ObjectKind interface {
	GroupVersionKind() GroupVersionKind
	SetGroupVersionKind(GroupVersionKind)
}
