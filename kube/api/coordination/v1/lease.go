package v1

import (
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/schema"
)

// SchemeGroupVersion is coordination.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: "coordination.k8s.io", Version: "v1"}

// Lease is a lease: who holds it, for how long, since when.
type Lease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              LeaseSpec `json:"spec,omitempty"`
}

// LeaseList is a list of leases.
type LeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Lease `json:"items"`
}

// LeaseSpec is every field of a lease's spec.
type LeaseSpec struct {
	HolderIdentity       *string           `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds *int32            `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *metav1.MicroTime `json:"acquireTime,omitempty"`
	RenewTime            *metav1.MicroTime `json:"renewTime,omitempty"`
	LeaseTransitions     *int32            `json:"leaseTransitions,omitempty"`
	Strategy             *string           `json:"strategy,omitempty"`
	PreferredHolder      *string           `json:"preferredHolder,omitempty"`
}
