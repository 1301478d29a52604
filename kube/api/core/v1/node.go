package v1

import metav1 "lockstep.dev/lockstep/kube/api/meta/v1"

// Node is a node: its pod CIDRs and addresses.
type Node struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeSpec   `json:"spec,omitempty"`
	Status            NodeStatus `json:"status,omitempty"`
}

// NodeList is a list of nodes.
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Node `json:"items"`
}

// NodeSpec is the part of a node's spec lockstep reads.
type NodeSpec struct {
	PodCIDR    string   `json:"podCIDR,omitempty"`
	PodCIDRs   []string `json:"podCIDRs,omitempty"`
	ProviderID string   `json:"providerID,omitempty"`
}

// NodeStatus is a node's addresses.
type NodeStatus struct {
	Addresses []NodeAddress `json:"addresses,omitempty"`
}

// NodeAddressType is the kind of a node address.
type NodeAddressType string

// The kinds of node addresses.
const (
	NodeHostName    NodeAddressType = "Hostname"
	NodeInternalIP  NodeAddressType = "InternalIP"
	NodeExternalIP  NodeAddressType = "ExternalIP"
	NodeInternalDNS NodeAddressType = "InternalDNS"
	NodeExternalDNS NodeAddressType = "ExternalDNS"
)

// NodeAddress is one address of a node.
type NodeAddress struct {
	Type    NodeAddressType `json:"type"`
	Address string          `json:"address"`
}

// LabelTopologyZone is the label of a node's zone.
const LabelTopologyZone = "topology.kubernetes.io/zone"
