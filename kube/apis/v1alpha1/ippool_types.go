package v1alpha1

import metav1 "lockstep.dev/lockstep/kube/api/meta/v1"

// IPPool is a cluster-wide set of pod address ranges of one family, which the
// operator cuts into blocks of spec.blockSize and assigns to nodes through
// their NodeIPAM objects. A dual-stack cluster has one pool per family.
//
// The operator owns the whole object's status; people (or GitOps) own spec.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=lockstep
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="CIDRs",type=string,JSONPath=`.spec.cidrs`
// +kubebuilder:printcolumn:name="Block Size",type=integer,JSONPath=`.spec.blockSize`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocatedBlocks`,description="Blocks held by nodes"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the pool's ranges and block size.
	Spec IPPoolSpec `json:"spec"`
	// Status is the operator's account of the pool.
	// +optional
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolSpec is the ranges of a pool and how they are cut.
//
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).prefixLength() <= self.blockSize)",message="blockSize must be at least every CIDR's prefix length: a block cannot be larger than its range"
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 6 || self.blockSize <= 32)",message="blockSize must be at most 32 for an IPv4 pool"
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || !isCIDR(self.cidrs[0]) || cidr(c).ip().family() == cidr(self.cidrs[0]).ip().family())",message="all CIDRs of a pool must be of one address family; make one pool per family"
type IPPoolSpec struct {
	// CIDRs are the ranges blocks are cut from, all of one address family,
	// in canonical form. They must not overlap each other or another
	// pool's (the operator reports overlap between pools in the Ready
	// condition). Adding a range grows the pool. Dropping one drains it:
	// the operator marks every assigned block outside the remaining
	// ranges for release with drain: true, nodes allocate nothing more
	// from those blocks, and each goes back once its pods are deleted
	// (see the package documentation). Deleting the pool drains all of
	// its blocks.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.all(b, a == b || !isCIDR(a) || !isCIDR(b) || !cidr(a).containsCIDR(b)))",message="CIDRs of a pool must not overlap"
	// +listType=set
	CIDRs []CIDR `json:"cidrs"`

	// BlockSize is the prefix length of the blocks nodes get: 26 gives a
	// node 64 IPv4 addresses at a time, 120 gives 256 IPv6 addresses. It
	// cannot change: blocks already handed out were cut to it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="blockSize is immutable: blocks already assigned were cut to it; create a new pool instead"
	BlockSize int32 `json:"blockSize"`
}

// IPPoolStatus is written by the operator only.
type IPPoolStatus struct {
	// ObservedGeneration is the metadata.generation of the spec this
	// status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AllocatedBlocks is how many of the pool's blocks are listed in some
	// NodeIPAM's spec.blocks.
	// +kubebuilder:validation:Minimum=0
	// +optional
	AllocatedBlocks int32 `json:"allocatedBlocks"`

	// Conditions are the operator's verdicts on the pool: Ready (its
	// ranges are usable; False with reason Overlap when they overlap
	// another pool's) and Exhausted (no free block is left).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of IPPoolStatus.Conditions.
const (
	// IPPoolReady is True when the operator hands out blocks from the pool.
	IPPoolReady = "Ready"
	// IPPoolExhausted is True when every block of the pool is assigned.
	IPPoolExhausted = "Exhausted"
)

// IPPoolList is a list of IPPools.
//
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the pools.
	Items []IPPool `json:"items"`
}
