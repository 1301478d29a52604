package store

import (
	"net/netip"
	"time"
)

// Pool is a range of addresses the node hands to pods.
type Pool struct {
	// Name identifies the pool, e.g. "default-ipv4".
	Name string
	CIDR netip.Prefix
	// Draining pools hand out no new addresses; they exist only while
	// allocations restored from disk still refer to them.
	Draining bool

	Revisions
}

// PodRef names the Kubernetes pod behind an attachment. Empty fields mean
// the runtime did not say (plain containers).
type PodRef struct {
	Namespace string
	Name      string
	UID       string
}

// Attachment is the CNI identity of one network attachment.
type Attachment struct {
	ContainerID string
	IfName      string
}

// Allocation is one address handed out from a pool. Its identity is
// (Pool, Addr); it is found from its owner by Attachment.
type Allocation struct {
	Pool string
	Addr netip.Addr
	Attachment
	Pod     PodRef
	Created time.Time

	Revisions
}

// EndpointState is where an attachment is in its ADD/DEL life cycle.
type EndpointState uint8

const (
	// EndpointPending: addresses are reserved and durable, the plugin is
	// wiring the pod; a DEL must wait for or cancel this ADD.
	EndpointPending EndpointState = iota + 1
	// EndpointReady: the ADD was confirmed, or the endpoint was restored
	// from disk.
	EndpointReady
	// EndpointCancelled: a DEL arrived while the ADD was in flight; the
	// ADD's Confirm will fail and the plugin will roll back.
	EndpointCancelled
)

func (s EndpointState) String() string {
	switch s {
	case EndpointPending:
		return "pending"
	case EndpointReady:
		return "ready"
	case EndpointCancelled:
		return "cancelled"
	}
	return "unknown"
}

// IsReadyEndpoint reports whether obj, a TableEndpoints object or nil (a
// Change's Before or After), is a Ready endpoint: one whose addresses are
// its pod's for everything computed from the store.
func IsReadyEndpoint(obj any) bool {
	e, ok := obj.(*Endpoint)
	return ok && e.State == EndpointReady
}

// AddressRef is one allocation of an endpoint, by its identity.
type AddressRef struct {
	Pool string
	Addr netip.Addr
	// Bits is the pool prefix length, so the pod sees its subnet.
	Bits int
}

// Prefix is the address with its pool's prefix length.
func (r AddressRef) Prefix() netip.Prefix { return netip.PrefixFrom(r.Addr, r.Bits) }

// Endpoint is a pod network attachment on this node.
type Endpoint struct {
	Attachment
	Netns      string
	HostIfName string
	Pod        PodRef
	Addresses  []AddressRef
	State      EndpointState
	// OpID identifies the ADD that created or last re-wired the endpoint.
	OpID uint64
	// Deadline is when a Pending ADD stops holding off a DEL.
	Deadline time.Time
	Created  time.Time

	Revisions
}

// Copy returns a copy that shares nothing mutable with e.
func (e *Endpoint) Copy() *Endpoint {
	c := *e
	c.Addresses = append([]AddressRef(nil), e.Addresses...)
	return &c
}

// Revisions records the store revisions that created and last modified an
// object. The write helpers set them; callers leave them alone.
type Revisions struct {
	CreateRevision uint64
	ModifyRevision uint64
}

func (r *Revisions) stamp(rev uint64) {
	if r.CreateRevision == 0 {
		r.CreateRevision = rev
	}
	r.ModifyRevision = rev
}

// TableRevision is the revision of the last write to a table.
type TableRevision struct {
	Table    string
	Revision uint64
}
