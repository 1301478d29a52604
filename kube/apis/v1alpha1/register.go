package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

var (
	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds IPPool, NodeIPAM and their lists to a scheme, with
	// the meta/v1 options (ListOptions, DeleteOptions, ...) of the group.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource, as API errors name it.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&IPPool{}, &IPPoolList{},
		&NodeIPAM{}, &NodeIPAMList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
