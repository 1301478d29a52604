package v1

import (
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/schema"
)

// SchemeGroupVersion is discovery.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"}

// LabelServiceName is the label naming an EndpointSlice's Service.
const LabelServiceName = "kubernetes.io/service-name"

// AddressType is the family of an EndpointSlice's addresses.
type AddressType string

// The address types.
const (
	AddressTypeIPv4 AddressType = "IPv4"
	AddressTypeIPv6 AddressType = "IPv6"
	AddressTypeFQDN AddressType = "FQDN"
)

// EndpointSlice is some of a Service's endpoints.
type EndpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	AddressType       AddressType    `json:"addressType"`
	Endpoints         []Endpoint     `json:"endpoints"`
	Ports             []EndpointPort `json:"ports"`
}

// EndpointSliceList is a list of EndpointSlices.
type EndpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EndpointSlice `json:"items"`
}

// Endpoint is one endpoint: its addresses, conditions, node and zone.
type Endpoint struct {
	Addresses  []string                `json:"addresses"`
	Conditions EndpointConditions      `json:"conditions,omitzero"`
	Hostname   *string                 `json:"hostname,omitempty"`
	TargetRef  *corev1.ObjectReference `json:"targetRef,omitempty"`
	NodeName   *string                 `json:"nodeName,omitempty"`
	Zone       *string                 `json:"zone,omitempty"`
	Hints      *EndpointHints          `json:"hints,omitempty"`
}

// EndpointConditions is an endpoint's readiness.
type EndpointConditions struct {
	Ready       *bool `json:"ready,omitempty"`
	Serving     *bool `json:"serving,omitempty"`
	Terminating *bool `json:"terminating,omitempty"`
}

// EndpointHints say which zones and nodes should use an endpoint.
type EndpointHints struct {
	ForZones []ForZone `json:"forZones,omitempty"`
	ForNodes []ForNode `json:"forNodes,omitempty"`
}

// ForZone names a zone.
type ForZone struct {
	Name string `json:"name"`
}

// ForNode names a node.
type ForNode struct {
	Name string `json:"name"`
}

// EndpointPort is a port of an EndpointSlice's endpoints.
type EndpointPort struct {
	Name        *string          `json:"name,omitempty"`
	Protocol    *corev1.Protocol `json:"protocol,omitempty"`
	Port        *int32           `json:"port,omitempty"`
	AppProtocol *string          `json:"appProtocol,omitempty"`
}
