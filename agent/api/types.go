package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"strings"
	"time"
)

// Version is the API version this package speaks. It prefixes every path.
const Version = "v1"

// Operations the agent serves. Each request names one.
//
// The three CNI operations do the whole verb in the agent. OpCNIAdd must
// and OpCNICheck may carry the pod's network namespace as a descriptor
// (SCM_RIGHTS) beside the request line; OpCNIDel may carry one, which the
// agent does not need. No other operation takes a descriptor, and none
// takes more than one (MaxFDs).
//
// OpAdd, OpConfirm and OpAbort are an ADD's reservation steps without the
// wiring (the plugin made them around its own wiring before the agent
// wired pods): the plugin no longer uses them; allocation benchmarks and
// tests that measure the store without netlink do, and a plugin one
// release older still works against this agent through them.
const (
	OpCNIAdd   = "cni-add"
	OpCNIDel   = "cni-del"
	OpCNICheck = "cni-check"
	OpAdd      = "add"
	OpConfirm  = "confirm"
	OpAbort    = "abort"
	OpDel      = "del"
	OpGet      = "get"
	OpGC       = "gc"
	OpStatus   = "status"
	// OpMonitor subscribes the connection to verdict events: the agent
	// answers with one empty Response, then writes one Verdict line per
	// event until the client closes the connection (see Verdict).
	OpMonitor = "monitor"
)

// MaxFDs is how many descriptors one request may carry: the pod's
// network namespace, or none.
const MaxFDs = 1

// Request is one line the client writes: a JSON object, then '\n'.
type Request struct {
	// Version must be Version; an agent that speaks another one answers
	// with CodeIncompatibleVersion instead of guessing.
	Version string          `json:"v"`
	Op      string          `json:"op"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// Response is the line the agent answers with: Body on success, Error
// otherwise.
type Response struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// Attachment identifies one network attachment of a container: the pair the
// CNI specification uses, (CNI_CONTAINERID, CNI_IFNAME).
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// PodRef is the Kubernetes pod an attachment belongs to, taken from
// CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID). All fields are
// optional: a plain container runtime sends none of them.
type PodRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// CNIAddRequest asks the agent to connect an attachment: reserve its
// addresses, wire its veth into the namespace passed with the request,
// attach the endpoint and put its policy in force, all before it answers.
type CNIAddRequest struct {
	Attachment
	// Netns is CNI_NETNS as the runtime names it. The agent records it
	// (CHECK compares it) but never opens it: it wires the namespace
	// whose descriptor came with the request.
	Netns string `json:"netns"`
	Pod   PodRef `json:"pod"`
	// MTU of both veth ends; 0 keeps the kernel's default.
	MTU int `json:"mtu,omitempty"`
}

// CNIAddResponse is what the agent wired: enough for the plugin to build
// the CNI result.
type CNIAddResponse struct {
	// HostIf is the node end of the veth, PodIf the end in the pod.
	HostIf Interface `json:"hostIf"`
	PodIf  Interface `json:"podIf"`
	// IPs are the pod's addresses as wired on PodIf (/32 and /128), each
	// with the gateway it routes through.
	IPs []IPConfig `json:"ips"`
	// Routes are the pod's routes through its gateways.
	Routes []Route `json:"routes"`
	// Addresses are the same addresses with the pools they came from.
	Addresses []Address `json:"addresses"`
}

// Interface is one end of a pod's veth.
type Interface struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
}

// IPConfig is one address of the pod interface and its gateway.
type IPConfig struct {
	Address netip.Prefix `json:"address"`
	Gateway netip.Addr   `json:"gateway"`
}

// Route is one route of the pod interface.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	GW  netip.Addr   `json:"gw"`
}

// CNICheckRequest asks the agent to compare an attachment's wiring with
// its record. The pod namespace comes with it as a descriptor, or none
// when the runtime's CNI_NETNS no longer exists.
type CNICheckRequest struct {
	Attachment
	Netns string `json:"netns"`
}

// CNICheckResponse is the agent's record of the attachment and every way
// the kernel's wiring differs from it; no Diffs means none.
type CNICheckResponse struct {
	Endpoint Endpoint `json:"endpoint"`
	Diffs    []string `json:"diffs,omitempty"`
}

// AddRequest is the reservation step of an ADD (OpAdd,
// endpoints.Service.Add).
type AddRequest struct {
	Attachment
	Netns string `json:"netns"`
	Pod   PodRef `json:"pod"`
}

// Address is one address handed to an attachment, with the pool it came
// from. Prefix is the pool's prefix length, so Address.Prefix().Masked() is
// the pool CIDR.
type Address struct {
	Pool    string       `json:"pool"`
	Address netip.Prefix `json:"address"`
}

// AddResponse is what the reservation step of an ADD reserved.
type AddResponse struct {
	// OpID identifies this ADD; Confirm and Abort must repeat it.
	OpID uint64 `json:"opID"`
	// HostIfName is the host-side veth name the agent recorded.
	HostIfName string `json:"hostIfName"`
	// Addresses holds one IPv4 address and, when the agent has an IPv6
	// pool, one IPv6 address.
	Addresses []Address `json:"addresses"`
	// Deadline is when the agent stops waiting for Confirm: a DEL that
	// arrives after it no longer waits for this ADD to roll back.
	Deadline time.Time `json:"deadline"`
}

// OpRequest confirms or aborts the ADD identified by OpID, inside the
// agent.
type OpRequest struct {
	Attachment
	OpID uint64 `json:"opID"`
}

// DelResponse reports what a DEL released.
type DelResponse struct {
	// Found is false when the agent had no record of the attachment; the
	// DEL still succeeds.
	Found      bool      `json:"found"`
	HostIfName string    `json:"hostIfName,omitempty"`
	Addresses  []Address `json:"addresses,omitempty"`
}

// Endpoint is the agent's committed view of one attachment.
type Endpoint struct {
	Attachment
	Netns      string    `json:"netns"`
	Pod        PodRef    `json:"pod"`
	HostIfName string    `json:"hostIfName"`
	Addresses  []Address `json:"addresses"`
	State      string    `json:"state"`
	OpID       uint64    `json:"opID"`
	Created    time.Time `json:"created"`
}

// GCRequest lists the attachments the runtime still knows about; the agent
// releases every other one (CNI GC, cni.dev/valid-attachments).
type GCRequest struct {
	Valid []Attachment `json:"valid"`
}

// GCResponse lists the endpoints the agent released, and the host
// interfaces of every endpoint it still holds (valid ones and ADDs still in
// flight), which a sweep of host links must leave alone.
type GCResponse struct {
	Released []Endpoint `json:"released"`
	Retained []string   `json:"retained"`
}

// PoolStatus is the usage of one address pool.
type PoolStatus struct {
	Name     string       `json:"name"`
	CIDR     netip.Prefix `json:"cidr"`
	Size     uint64       `json:"size"`
	Used     uint64       `json:"used"`
	Free     uint64       `json:"free"`
	Draining bool         `json:"draining,omitempty"`
}

// StatusResponse is the agent's health: the pools the CNI STATUS verb
// needs, and the dataplane `lockstep status` shows.
type StatusResponse struct {
	Pools     []PoolStatus     `json:"pools"`
	Dataplane *DataplaneStatus `json:"dataplane,omitempty"`
}

// DataplaneStatus is what the agent's dataplane enforces and what it still
// owes.
type DataplaneStatus struct {
	// Name is the backend in use with its variant: "ebpf",
	// "iptables-nft", "iptables-legacy", "hns".
	Name string `json:"name"`
	// LastApply is when the last apply finished; zero before the first.
	LastApply time.Time `json:"lastApply,omitzero"`
	// LastApplyError is the last apply's error; empty when it succeeded.
	LastApplyError string `json:"lastApplyError,omitempty"`
	// Counts are the backend's sizes: sets, rules, chains, map entries,
	// and the eBPF conntrack tables' evictions ("evicted from lockstep_ct").
	Counts map[string]int `json:"counts,omitempty"`
	// Services is the Service translation of the last apply.
	Services *ServicesStatus `json:"services,omitempty"`
	// PendingCleanups are backends lockstep stopped using and has not
	// finished cleaning yet.
	PendingCleanups []CleanupStatus `json:"pendingCleanups"`
	// FailedPolicies are the NetworkPolicies the last apply could not
	// enforce as written (they do not compile, or their namespace is over
	// its budget); the pods they select fail closed.
	FailedPolicies []PolicyFailure `json:"failedPolicies,omitempty"`
	// FailedEndpoints are the local endpoints with a direction that fails
	// closed: isolated, with no allow.
	FailedEndpoints []EndpointFailure `json:"failedEndpoints,omitempty"`
}

// PolicyFailure is a NetworkPolicy that fails closed, and why.
type PolicyFailure struct {
	Policy string `json:"policy"` // namespace/name
	Reason string `json:"reason"`
}

// EndpointFailure is a local endpoint with no allow in a direction, and
// why (empty for a direction enforced as written).
type EndpointFailure struct {
	HostIf  string `json:"hostIf"`
	Ingress string `json:"ingress,omitempty"`
	Egress  string `json:"egress,omitempty"`
}

// ServicesStatus counts the Service translation a dataplane applied.
type ServicesStatus struct {
	// Frontends are the ClusterIP, port and protocol triples translated.
	Frontends int `json:"frontends"`
	// Backends are the endpoints they translate to, summed over frontends.
	Backends int `json:"backends"`
	// WithoutBackends are the frontends with no ready endpoint, whose
	// connections are refused.
	WithoutBackends int `json:"withoutBackends"`
	// WithoutLocalBackends are the frontends whose ready endpoints are all
	// on other nodes under internalTrafficPolicy Local, whose connections
	// from this node's pods are dropped.
	WithoutLocalBackends int `json:"withoutLocalBackends,omitempty"`
	// LeftToKubeProxy: the dataplane translates none of them, kube-proxy
	// does (the agent's --service-translation=false, or the iptables
	// dataplane in Kubernetes mode); the counts are what it was given.
	LeftToKubeProxy bool `json:"leftToKubeProxy,omitempty"`
	// OverCapacity are the namespaces whose Services the node's Service
	// maps cannot hold, not translated (kube-proxy, where it runs,
	// translates them; no frontend they own is counted above).
	OverCapacity []ServicesOverCapacity `json:"overCapacity,omitempty"`
}

// ServicesOverCapacity is a namespace whose Services are not translated,
// and why.
type ServicesOverCapacity struct {
	Namespace string `json:"namespace"`
	Reason    string `json:"reason"`
}

// CleanupStatus is one pending clean-up of a backend.
type CleanupStatus struct {
	Backend     string    `json:"backend"`
	Reason      string    `json:"reason"`
	Since       time.Time `json:"since"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"lastError,omitempty"`
	LastAttempt time.Time `json:"lastAttempt,omitzero"`
}

// HostIfName is the deterministic name of an attachment's host-side veth:
// HostIfPrefix and hostIfHashLen hex digits of sha256(containerID "/"
// ifName). The plugin, the agent and GC all derive it here, so a DEL finds
// the link even when the agent has no record of it.
func HostIfName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return HostIfPrefix + hex.EncodeToString(sum[:hostIfHashLen/2])
}

// IsHostIfName reports whether name has the shape HostIfName produces.
func IsHostIfName(name string) bool {
	hash, ok := strings.CutPrefix(name, HostIfPrefix)
	if !ok || len(hash) != hostIfHashLen {
		return false
	}
	for _, c := range hash {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HostIfPrefix starts the name of every host-side veth lockstep creates.
const HostIfPrefix = "ls"

// hostIfHashLen is how many hex digits follow HostIfPrefix; together they
// fit IFNAMSIZ with room to spare.
const hostIfHashLen = 12
