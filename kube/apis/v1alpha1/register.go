package v1alpha1

import (
	"lockstep.dev/lockstep/kube/api/schema"
)

// GroupName is the API group of lockstep's custom resources.
const GroupName = "lockstep.dev"

// Resource names, as they appear in API paths and RBAC rules.
const (
	IPPoolResource   = "ippools"
	NodeIPAMResource = "nodeipams"
)

// SchemeGroupVersion is the group and version of every type in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource returns the group-qualified resource, as API errors name it.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}
