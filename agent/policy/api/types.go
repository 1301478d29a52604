package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// TypeMeta is the kind and API version every Kubernetes object carries.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is the part of Kubernetes' metadata that lockstep uses.
// Other metadata fields in a manifest are ignored.
type ObjectMeta struct {
	Name            string            `json:"name,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// NamespaceNameLabel is the label the API server puts on every namespace,
// set to the namespace's name. Namespace selectors commonly match on it, so
// lockstep adds it wherever a namespace's labels are read.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// Namespace is a Kubernetes v1 Namespace; only its labels matter to policy.
type Namespace struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
}

// Pod is the part of a Kubernetes v1 Pod that policy needs: labels, named
// container ports and addresses.
type Pod struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Spec       PodSpec   `json:"spec"`
	Status     PodStatus `json:"status"`
}

// PodSpec is the part of a pod's spec that policy needs.
type PodSpec struct {
	// NodeName is the node the pod is scheduled to ("" when unscheduled).
	NodeName string `json:"nodeName,omitempty"`
	// HostNetwork pods share their node's addresses; NetworkPolicy does not
	// apply to them and their addresses are never mapped to their identity.
	HostNetwork bool        `json:"hostNetwork,omitempty"`
	Containers  []Container `json:"containers,omitempty"`
}

// Container is a pod's container; only its ports matter to policy.
type Container struct {
	Name  string          `json:"name,omitempty"`
	Ports []ContainerPort `json:"ports,omitempty"`
}

// ContainerPort is a port a container declares. Named ones can be referred
// to by NetworkPolicy ports.
type ContainerPort struct {
	Name          string   `json:"name,omitempty"`
	ContainerPort int32    `json:"containerPort"`
	Protocol      Protocol `json:"protocol,omitempty"` // "" means TCP
}

// PodPhase is a pod's lifecycle phase.
type PodPhase string

// Pod phases whose addresses lockstep stops mapping to the pod: the
// address may already belong to a new pod.
const (
	PodSucceeded PodPhase = "Succeeded"
	PodFailed    PodPhase = "Failed"
)

// PodStatus is the part of a pod's status that policy needs.
type PodStatus struct {
	Phase PodPhase `json:"phase,omitempty"`
	// PodIP is the pod's primary address; PodIPs, when set, lists all of
	// them (the API server keeps PodIPs[0] == PodIP).
	PodIP  string  `json:"podIP,omitempty"`
	PodIPs []PodIP `json:"podIPs,omitempty"`
}

// PodIP is one address of a pod.
type PodIP struct {
	IP string `json:"ip"`
}

// Protocol is a transport protocol name: TCP, UDP or SCTP.
type Protocol string

// Protocols NetworkPolicy ports and container ports may name.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// PolicyType is a direction a NetworkPolicy applies to.
type PolicyType string

// Policy types.
const (
	PolicyTypeIngress PolicyType = "Ingress"
	PolicyTypeEgress  PolicyType = "Egress"
)

// NetworkPolicy is a Kubernetes networking.k8s.io/v1 NetworkPolicy.
type NetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Spec       NetworkPolicySpec `json:"spec"`
}

// NetworkPolicySpec says which pods a policy selects and what it allows.
type NetworkPolicySpec struct {
	// PodSelector selects the pods of the policy's namespace the policy
	// applies to; the empty selector selects all of them.
	PodSelector LabelSelector `json:"podSelector"`
	Ingress     []IngressRule `json:"ingress,omitempty"`
	Egress      []EgressRule  `json:"egress,omitempty"`
	PolicyTypes []PolicyType  `json:"policyTypes,omitempty"`
}

// IngressRule allows traffic from any of From to any of Ports. An empty
// From allows every source; empty Ports allows every port and protocol.
type IngressRule struct {
	Ports []NetworkPolicyPort `json:"ports,omitempty"`
	From  []NetworkPolicyPeer `json:"from,omitempty"`
}

// EgressRule allows traffic to any of To on any of Ports. An empty To
// allows every destination; empty Ports allows every port and protocol.
type EgressRule struct {
	Ports []NetworkPolicyPort `json:"ports,omitempty"`
	To    []NetworkPolicyPeer `json:"to,omitempty"`
}

// NetworkPolicyPort is a port (or range, or named port) of one protocol.
type NetworkPolicyPort struct {
	// Protocol defaults to TCP.
	Protocol *Protocol `json:"protocol,omitempty"`
	// Port is a number or a container port name; nil means every port.
	Port *IntOrString `json:"port,omitempty"`
	// EndPort makes a numeric Port the start of the range [Port, EndPort].
	EndPort *int32 `json:"endPort,omitempty"`
}

// NetworkPolicyPeer is one set of remote endpoints: pods chosen by
// selectors, or an address block. Exactly one kind must be set.
type NetworkPolicyPeer struct {
	PodSelector       *LabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`
	IPBlock           *IPBlock       `json:"ipBlock,omitempty"`
}

// IPBlock is the addresses of CIDR except those in any of Except.
type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// LabelSelector selects label sets matching all of MatchLabels and all of
// MatchExpressions. The empty selector matches everything.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorOperator is the operator of a selector requirement.
type LabelSelectorOperator string

// Selector operators.
const (
	OpIn           LabelSelectorOperator = "In"
	OpNotIn        LabelSelectorOperator = "NotIn"
	OpExists       LabelSelectorOperator = "Exists"
	OpDoesNotExist LabelSelectorOperator = "DoesNotExist"
)

// LabelSelectorRequirement is one expression of a selector.
type LabelSelectorRequirement struct {
	Key      string                `json:"key"`
	Operator LabelSelectorOperator `json:"operator"`
	Values   []string              `json:"values,omitempty"`
}

// IntOrString holds a JSON number or a JSON string, as Kubernetes'
// intstr.IntOrString does. Ports use it for "80" versus "http".
type IntOrString struct {
	// IsString says which of IntVal and StrVal holds the value.
	IsString bool
	IntVal   int32
	StrVal   string
}

// FromInt returns an IntOrString holding the number v.
func FromInt(v int32) *IntOrString { return &IntOrString{IntVal: v} }

// FromString returns an IntOrString holding the string s.
func FromString(s string) *IntOrString { return &IntOrString{IsString: true, StrVal: s} }

// String returns the value as written.
func (v IntOrString) String() string {
	if v.IsString {
		return v.StrVal
	}
	return strconv.Itoa(int(v.IntVal))
}

// UnmarshalJSON accepts a JSON string or a JSON integer that fits int32.
func (v *IntOrString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		*v = IntOrString{IsString: true}
		return json.Unmarshal(b, &v.StrVal)
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("int or string: %w", err)
	}
	*v = IntOrString{IntVal: n}
	return nil
}

// MarshalJSON writes the value as a JSON string or number.
func (v IntOrString) MarshalJSON() ([]byte, error) {
	if v.IsString {
		return json.Marshal(v.StrVal)
	}
	return json.Marshal(v.IntVal)
}

// NamespaceOrDefault is the namespace of a namespaced object: "default" when
// it names none.
func NamespaceOrDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
