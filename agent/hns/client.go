package hns

import (
	"errors"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Errors a Client reports. The real client wraps HNS's own errors in them
// where HNS says what went wrong; Memory returns them as HNS would.
var (
	// ErrEndpointNotFound: no HNS endpoint has that name (it was deleted,
	// or the CNI plugin has not created it yet). HNS deletes an endpoint's
	// policies with it, so its ACLs no longer reference any SetPolicy.
	ErrEndpointNotFound = errors.New("hns endpoint not found")
	// ErrSetNotFound: a SetPolicy that a request names does not exist on
	// the network (an ACL or nested set referencing it, or an update or
	// delete of it).
	ErrSetNotFound = errors.New("set policy does not exist")
	// ErrSetExists: a SetPolicy with that ID already exists.
	ErrSetExists = errors.New("set policy already exists")
	// ErrSetInUse: the SetPolicy is still referenced by an endpoint ACL or
	// a nested set and HNS refuses to delete it.
	ErrSetInUse = errors.New("set policy is still referenced")
	// ErrInvalid: HNS rejected the request as malformed ("The provided
	// policy configuration is invalid or missing parameters").
	ErrInvalid = errors.New("invalid hns policy")
	// ErrTransient: the call failed for a reason that may pass (HNS busy,
	// an RPC timeout). The request may or may not have taken effect, or
	// taken effect in part.
	ErrTransient = errors.New("transient hns failure")
)

// IDPrefix starts the ID of every SetPolicy and ACL lockstep creates. A
// Client lists and replaces only objects whose ID has it, so lockstep
// shares a network with kube-proxy, the CNI plugin and other policy agents
// without touching their policies.
const IDPrefix = "lockstep-"

// SetPolicyType is the type of a SetPolicy, as HNS (hcn.SetPolicyType)
// spells it.
type SetPolicyType string

// SetPolicy types.
const (
	// SetIPSet holds addresses and prefixes. Available from HNS 13.0
	// (hcn.SetPolicySupported).
	SetIPSet SetPolicyType = "IPSET"
	// SetNestedIPSet holds the IDs of IPSETs: an address is in it when it
	// is in any member. Available from HNS 15.0 (hcn.NestedIpSetSupported).
	SetNestedIPSet SetPolicyType = "NESTEDIPSET"
)

// SetPolicy is one set of a network's SetPolicies (hcn.SetPolicySetting):
// ACLs reference it by ID in place of a list of addresses.
type SetPolicy struct {
	// ID is what ACLs and nested sets reference; it starts with IDPrefix.
	ID string
	// Name is a readable name; HNS does not interpret it.
	Name string
	// Type is IPSET or NESTEDIPSET.
	Type SetPolicyType
	// Values are, for an IPSET, addresses and prefixes ("10.0.0.7",
	// "10.1.0.0/16", "fd00::/64"); for a NESTEDIPSET, the IDs of member
	// IPSETs. HNS takes them as one comma-separated string. Sorted.
	Values []string
}

// Direction is the direction of an ACL as HNS spells it
// (hcn.DirectionType): In is traffic to the endpoint, Out from it.
type Direction string

// Directions.
const (
	In  Direction = "In"
	Out Direction = "Out"
)

// directionOf maps a policy direction to HNS's.
func directionOf(d policyapi.Direction) Direction {
	if d == policyapi.Ingress {
		return In
	}
	return Out
}

// Action is what an ACL does with the packets it matches (hcn.ActionType).
type Action string

// Actions.
const (
	Allow Action = "Allow"
	Block Action = "Block"
)

// ProtocolAny in ACL.Protocol matches every protocol (HNS: Protocols left
// empty).
const ProtocolAny uint8 = 0

// ACL is one ACL endpoint policy (hcn.AclPolicySetting, plus the Id field
// HNS accepts but hcn does not declare). HNS evaluates an endpoint's ACLs of
// one direction in Priority order, lowest first; the first that matches
// decides. Once an endpoint has ACLs, what none of them allows is blocked.
type ACL struct {
	// ID identifies the ACL; lockstep's start with IDPrefix.
	ID string
	// Direction and Action: see their types.
	Direction Direction
	Action    Action
	// Protocol is an IP protocol number, or ProtocolAny.
	Protocol uint8
	// LocalPorts and RemotePorts restrict the endpoint's and the remote
	// end's port (nil: any port); only for TCP, UDP and SCTP. The
	// destination port is LocalPorts for In and RemotePorts for Out.
	LocalPorts, RemotePorts []policy.PortRange
	// RemoteSets are the IDs of the SetPolicies the remote address must be
	// in (any of them); nil matches every remote address. The real client
	// sends them where Azure NPM does: LocalAddresses for In, RemoteAddresses
	// for Out (HNS names the fields by the packet's source and destination).
	RemoteSets []string
	// Priority orders the ACLs: lower runs first. 1..65535.
	Priority uint16
}

// Client is the part of HNS (the Host Networking Service, through the hcn
// API) that lockstep needs: the SetPolicies of the pod network and the ACL
// policies of its endpoints. It sees only lockstep's objects (IDPrefix).
// Every method is one HNS request, or one read.
//
// HNS enforces what Memory enforces: a SetPolicy referenced by an ACL or a
// nested set cannot be deleted; an ACL or nested set can only reference
// SetPolicies that exist. Calls can fail transiently and can then have
// taken effect in part; a caller that gets an error must read the state
// back before it trusts what it thinks is applied.
type Client interface {
	// SetPolicies lists lockstep's SetPolicies on the network.
	SetPolicies() ([]SetPolicy, error)
	// AddSetPolicies creates sets in one request (Modify network settings,
	// RequestType Add). Members of a nested set must exist already.
	AddSetPolicies(sets []SetPolicy) error
	// UpdateSetPolicies replaces the values of existing sets in one request
	// (RequestType Update).
	UpdateSetPolicies(sets []SetPolicy) error
	// DeleteSetPolicies deletes sets, as listed, in one request
	// (RequestType Remove).
	DeleteSetPolicies(sets []SetPolicy) error
	// Endpoint reports whether the HNS endpoint name exists: nil, or an
	// error wrapping ErrEndpointNotFound.
	Endpoint(name string) error
	// EndpointACLs returns lockstep's ACLs on every endpoint of the network
	// that has any, keyed by endpoint name.
	EndpointACLs() (map[string][]ACL, error)
	// SetEndpointACLs replaces lockstep's ACLs on endpoint name with acls
	// (nil removes them) in one request (modify endpoint, RequestType
	// Update), leaving every other policy of the endpoint as it is.
	SetEndpointACLs(name string, acls []ACL) error
}
