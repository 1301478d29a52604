package v1alpha1

import (
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
)

// ReleaseState is a step of the block release handshake; the package
// documentation walks through it. The operator writes MarkedForRelease and
// Released in spec.releases, the agent ReadyForRelease and DoNotRelease in
// status.releases.
type ReleaseState string

// Release handshake states. They are strings, not numbers, so that
// `kubectl get nodeipam -o yaml` reads as the protocol it is.
const (
	// MarkedForRelease: the operator wants the block back.
	MarkedForRelease ReleaseState = "marked-for-release"
	// ReadyForRelease: the block is empty and the agent has durably
	// stopped allocating from it.
	ReadyForRelease ReleaseState = "ready-for-release"
	// DoNotRelease: the block holds allocations; the operator should
	// withdraw its mark, unless the mark is a drain (ReleaseMark.Drain):
	// then it waits for ready-for-release.
	DoNotRelease ReleaseState = "do-not-release"
	// Released: the operator removed the block from spec.blocks and put it
	// back in its pool; the agent drops it.
	Released ReleaseState = "released"
)

// NodeKind and NodeAPIVersion are what a NodeIPAM's controller owner
// reference names.
const (
	NodeKind       = "Node"
	NodeAPIVersion = "v1"
)

// NewNodeIPAM returns an empty NodeIPAM for the Node named node with UID
// uid: named after the Node and controlled by it, so the garbage collector
// deletes it with the Node and a re-created Node of the same name is not
// mistaken for its predecessor (see ControlledBy). BlockOwnerDeletion is
// left unset: it would need the operator to be allowed to update Nodes'
// finalizers, and nothing waits on the NodeIPAM's deletion.
func NewNodeIPAM(node string, uid types.UID) *NodeIPAM {
	controller := true
	return &NodeIPAM{
		TypeMeta: metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: "NodeIPAM"},
		ObjectMeta: metav1.ObjectMeta{
			Name: node,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: NodeAPIVersion,
				Kind:       NodeKind,
				Name:       node,
				UID:        uid,
				Controller: &controller,
			}},
		},
	}
}

// ControlledBy reports whether n belongs to the Node with UID nodeUID: its
// controller owner reference is that Node. An agent must use a NodeIPAM
// only when this holds for the Node it runs on; a false answer for an
// object of the right name means a stale object from a deleted Node whose
// garbage collection has not happened yet.
func (n *NodeIPAM) ControlledBy(nodeUID types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(n)
	return ref != nil && ref.Kind == NodeKind && ref.APIVersion == NodeAPIVersion &&
		ref.Name == n.Name && ref.UID == nodeUID && nodeUID != ""
}

// Block returns the assigned block cidr, or nil.
func (s *NodeIPAMSpec) Block(cidr CIDR) *Block {
	for i := range s.Blocks {
		if s.Blocks[i].CIDR == cidr {
			return &s.Blocks[i]
		}
	}
	return nil
}

// Mark returns the operator's release mark for cidr, or nil.
func (s *NodeIPAMSpec) Mark(cidr CIDR) *ReleaseMark {
	for i := range s.Releases {
		if s.Releases[i].CIDR == cidr {
			return &s.Releases[i]
		}
	}
	return nil
}

// Draining reports whether block cidr is marked for release with a drain
// mark: it is outside its IPPool, the agent allocates nothing more from
// it, and it goes back once its last address is freed.
func (s *NodeIPAMSpec) Draining(cidr CIDR) bool {
	m := s.Mark(cidr)
	return m != nil && m.State == MarkedForRelease && m.Drain
}

// Answer returns the agent's answer for cidr, or nil.
func (s *NodeIPAMStatus) Answer(cidr CIDR) *ReleaseAnswer {
	for i := range s.Releases {
		if s.Releases[i].CIDR == cidr {
			return &s.Releases[i]
		}
	}
	return nil
}

// StatusCurrent reports whether the agent's status answers the spec as it
// is now: status.observedGeneration equals metadata.generation. Answers in
// a status that is not current may have been given to an earlier mark.
func (n *NodeIPAM) StatusCurrent() bool {
	return n.Generation != 0 && n.Status.ObservedGeneration == n.Generation
}

// MayRelease reports whether the operator may take block cidr back now: it
// is assigned, marked for release, and the agent answered ready-for-release
// to this very spec. It is the only test the operator may use before
// removing a block from spec.blocks of a live node.
func (n *NodeIPAM) MayRelease(cidr CIDR) bool {
	if n.Spec.Block(cidr) == nil {
		return false
	}
	mark := n.Spec.Mark(cidr)
	if mark == nil || mark.State != MarkedForRelease || !n.StatusCurrent() {
		return false
	}
	answer := n.Status.Answer(cidr)
	return answer != nil && answer.State == ReadyForRelease
}
