package v1alpha1

import metav1 "lockstep.dev/lockstep/kube/api/meta/v1"

// NodeIPAM is one node's share of the pools: the blocks the operator
// assigned to it (spec, written only by the operator), how full they are
// (status, written only by that node's agent), and the two halves of the
// block release handshake. It is named after its Node and its controller
// owner reference carries that Node's UID: an object of the right name
// owned by another UID is left over from a deleted Node and must not be
// used.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=lockstep
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Blocks",type=string,JSONPath=`.spec.blocks[*].cidr`
// +kubebuilder:printcolumn:name="Releasing",type=string,JSONPath=`.spec.releases[?(@.state=="marked-for-release")].cidr`
// +kubebuilder:printcolumn:name="Draining",type=string,JSONPath=`.spec.releases[?(@.drain==true)].cidr`,priority=1,description="Blocks outside their IPPool, released once empty"
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.metadata.generation`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,priority=1,description="Spec generation the agent last answered"
// +kubebuilder:printcolumn:name="Reported",type=date,JSONPath=`.status.lastReportTime`,description="When the agent last wrote status"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeIPAM struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is written by the operator only.
	// +optional
	Spec NodeIPAMSpec `json:"spec,omitempty"`
	// Status is written by the node's agent only.
	// +optional
	Status NodeIPAMStatus `json:"status,omitempty"`
}

// NodeIPAMSpec is the operator's half: what the node holds and what the
// operator wants back.
//
// +kubebuilder:validation:XValidation:rule="!has(self.releases) || self.releases.all(r, r.state != 'marked-for-release' || (has(self.blocks) && self.blocks.exists(b, b.cidr == r.cidr)))",message="a block marked-for-release must still be in spec.blocks"
// +kubebuilder:validation:XValidation:rule="!has(self.releases) || self.releases.all(r, r.state != 'released' || !has(self.blocks) || !self.blocks.exists(b, b.cidr == r.cidr))",message="a released block must be gone from spec.blocks"
type NodeIPAMSpec struct {
	// Blocks are the address blocks assigned to the node, each inside
	// its pool's spec.cidrs when assigned. The agent allocates pod
	// addresses from these only, and not from one marked for release.
	// +listType=map
	// +listMapKey=cidr
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Blocks []Block `json:"blocks,omitempty"`

	// Releases are the operator's release marks, one per block it wants
	// back or has just taken back.
	// +listType=map
	// +listMapKey=cidr
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Releases []ReleaseMark `json:"releases,omitempty"`
}

// Block is one block of a pool assigned to a node.
type Block struct {
	// CIDR is the block, blockSize bits long, inside one of the pool's
	// ranges.
	CIDR CIDR `json:"cidr"`
	// Pool is the name of the IPPool the block was cut from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
}

// ReleaseMark is the operator's side of the handshake for one block.
type ReleaseMark struct {
	// CIDR is the block the mark is about.
	CIDR CIDR `json:"cidr"`
	// State is marked-for-release (the operator wants the block back; it
	// is still in spec.blocks) or released (the operator took it: it is
	// gone from spec.blocks and back in its pool).
	// +kubebuilder:validation:Enum=marked-for-release;released
	State ReleaseState `json:"state"`
	// Since is when the operator set State.
	Since metav1.Time `json:"since"`
	// Drain marks a block the operator wants back because it is no
	// longer inside its IPPool's spec.cidrs (an administrator shrank the
	// pool, or deleted it), rather than because the node has it to spare.
	// The agent stops allocating from a drained block at once, whether or
	// not it holds addresses; the addresses it holds stay with their pods
	// until the pods are deleted. It answers do-not-release while any
	// remain and ready-for-release once the last is freed. The operator
	// never withdraws a drain mark: it waits for that answer, however
	// long, and gives the node another block meanwhile if it needs one.
	// +optional
	Drain bool `json:"drain,omitempty"`
}

// NodeIPAMStatus is the agent's half: how full its blocks are and its
// answers to release marks.
type NodeIPAMStatus struct {
	// ObservedGeneration is the metadata.generation of the spec the agent
	// had applied when it wrote this status. Release answers count only
	// while it equals metadata.generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastReportTime is when the agent last wrote this status.
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty"`

	// Blocks are the agent's usage report, one entry per block it holds.
	// Reports are coalesced (at most one write per report interval), so a
	// count may lag the node by that interval: never take a block back on
	// a low count alone, mark it for release.
	// +listType=map
	// +listMapKey=cidr
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Blocks []BlockUsage `json:"blocks,omitempty"`

	// Releases are the agent's answers to the operator's marks.
	// +listType=map
	// +listMapKey=cidr
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Releases []ReleaseAnswer `json:"releases,omitempty"`
}

// BlockUsage is how full one block is.
type BlockUsage struct {
	// CIDR is the block.
	CIDR CIDR `json:"cidr"`
	// Allocated is how many of the block's addresses hold an endpoint.
	// +kubebuilder:validation:Minimum=0
	Allocated int32 `json:"allocated"`
}

// ReleaseAnswer is the agent's side of the handshake for one block.
type ReleaseAnswer struct {
	// CIDR is the block the answer is about.
	CIDR CIDR `json:"cidr"`
	// State is ready-for-release (the block holds no allocation and the
	// agent has durably stopped allocating from it) or do-not-release (it
	// holds allocations).
	// +kubebuilder:validation:Enum=ready-for-release;do-not-release
	State ReleaseState `json:"state"`
	// Since is when the agent set State.
	Since metav1.Time `json:"since"`
}

// NodeIPAMList is a list of NodeIPAMs.
//
// +kubebuilder:object:root=true
type NodeIPAMList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the NodeIPAMs.
	Items []NodeIPAM `json:"items"`
}
