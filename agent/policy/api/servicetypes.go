package api

import "net/netip"

// Service is the part of a Kubernetes v1 Service that a dataplane needs to
// translate it for pods: its ClusterIPs, externalIPs, load-balancer IPs,
// ports and NodePorts, type, session affinity, traffic policies and
// selector, and the labels (of which it reads ServiceProxyNameLabel).
// Like the other object types it mirrors the API's field names, so a
// manifest written for Kubernetes parses unchanged; other fields are
// ignored.
type Service struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Spec       ServiceSpec `json:"spec"`
	// Status is what a load balancer's controller reports: the addresses
	// it gave the Service.
	Status ServiceStatus `json:"status,omitzero"`
}

// ServiceType is how a Service is exposed. Every type but ExternalName has
// ClusterIPs that pods reach it by.
type ServiceType string

// Service types.
const (
	ServiceTypeClusterIP    ServiceType = "ClusterIP"
	ServiceTypeNodePort     ServiceType = "NodePort"
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
	ServiceTypeExternalName ServiceType = "ExternalName"
)

// ClusterIPNone is the ClusterIP of a headless Service: it has no address
// to translate, its clients reach the endpoints directly.
const ClusterIPNone = "None"

// ServiceAffinity is a Service's session affinity.
type ServiceAffinity string

// Session affinities.
const (
	ServiceAffinityNone     ServiceAffinity = "None"
	ServiceAffinityClientIP ServiceAffinity = "ClientIP"
)

// ServiceSpec is the part of a Service's spec a dataplane needs.
type ServiceSpec struct {
	// Type is ClusterIP when empty.
	Type ServiceType `json:"type,omitempty"`
	// ClusterIP is the primary address; ClusterIPs, when set, lists every
	// address (one per family, ClusterIPs[0] == ClusterIP). "None" makes
	// the Service headless.
	ClusterIP  string        `json:"clusterIP,omitempty"`
	ClusterIPs []string      `json:"clusterIPs,omitempty"`
	Ports      []ServicePort `json:"ports,omitempty"`
	// Selector picks the pods of the Service's namespace that are its
	// endpoints. Empty means the endpoints are managed by someone else
	// (EndpointSlices written by hand or by another controller).
	Selector              map[string]string      `json:"selector,omitempty"`
	SessionAffinity       ServiceAffinity        `json:"sessionAffinity,omitempty"`
	SessionAffinityConfig *SessionAffinityConfig `json:"sessionAffinityConfig,omitempty"`
	// InternalTrafficPolicy is Cluster when nil: pods' connections to a
	// ClusterIP go to any endpoint. Local keeps them on their node: only
	// endpoints on the client's node, and none when it has none.
	InternalTrafficPolicy *ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`
	// ExternalIPs are addresses kube-proxy translates like the ClusterIPs,
	// on every node, for anyone, pods included.
	ExternalIPs []string `json:"externalIPs,omitempty"`
	// ExternalTrafficPolicy is Cluster when empty: connections to an
	// externalIP, a load-balancer IP or a NodePort go to any endpoint,
	// masqueraded. Local keeps outside clients' connections on endpoints of
	// the node they arrive at.
	ExternalTrafficPolicy ServiceExternalTrafficPolicy `json:"externalTrafficPolicy,omitempty"`
	// LoadBalancerSourceRanges, when set, are the only clients kube-proxy
	// lets reach the load-balancer IPs.
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`
}

// ServiceExternalTrafficPolicy says which endpoints serve connections to a
// Service's externalIPs, load-balancer IPs and NodePorts.
type ServiceExternalTrafficPolicy string

// External traffic policies.
const (
	ServiceExternalTrafficPolicyCluster ServiceExternalTrafficPolicy = "Cluster"
	ServiceExternalTrafficPolicyLocal   ServiceExternalTrafficPolicy = "Local"
)

// ServiceStatus is the status of a Service.
type ServiceStatus struct {
	LoadBalancer LoadBalancerStatus `json:"loadBalancer,omitzero"`
}

// LoadBalancerStatus lists the addresses a load balancer serves the
// Service at.
type LoadBalancerStatus struct {
	Ingress []LoadBalancerIngress `json:"ingress,omitempty"`
}

// LoadBalancerIngress is one address of a load balancer. Hostnames are
// not read: nothing on the node translates them.
type LoadBalancerIngress struct {
	IP string `json:"ip,omitempty"`
	// IPMode is VIP when nil: kube-proxy translates the address on every
	// node. Proxy means the load balancer rewrites the destination itself,
	// so the address is left alone.
	IPMode *LoadBalancerIPMode `json:"ipMode,omitempty"`
}

// LoadBalancerIPMode says how a load balancer delivers traffic.
type LoadBalancerIPMode string

// Load-balancer IP modes.
const (
	LoadBalancerIPModeVIP   LoadBalancerIPMode = "VIP"
	LoadBalancerIPModeProxy LoadBalancerIPMode = "Proxy"
)

// ServiceInternalTrafficPolicy says which endpoints serve the traffic of
// the cluster's own pods and nodes to a Service.
type ServiceInternalTrafficPolicy string

// Internal traffic policies.
const (
	ServiceInternalTrafficPolicyCluster ServiceInternalTrafficPolicy = "Cluster"
	ServiceInternalTrafficPolicyLocal   ServiceInternalTrafficPolicy = "Local"
)

// ServiceProxyNameLabel on a Service hands it to the Service proxy it
// names: kube-proxy leaves such a Service alone, and so does lockstep.
const ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"

// ServicePort is one port of a Service.
type ServicePort struct {
	// Name must be set when a Service has more than one port; its
	// EndpointSlices carry the same name for the port's endpoints.
	Name string `json:"name,omitempty"`
	// Protocol is TCP when empty.
	Protocol Protocol `json:"protocol,omitempty"`
	// Port is the port of the ClusterIPs, externalIPs and load-balancer
	// IPs.
	Port int32 `json:"port"`
	// NodePort is the port of the node's own addresses (NodePort and
	// LoadBalancer Services; 0 for none).
	NodePort int32 `json:"nodePort,omitempty"`
	// TargetPort is the endpoints' port: a number, or the name of a
	// container port resolved on each pod. Nil means Port.
	TargetPort *IntOrString `json:"targetPort,omitempty"`
}

// SessionAffinityConfig configures session affinity.
type SessionAffinityConfig struct {
	ClientIP *ClientIPConfig `json:"clientIP,omitempty"`
}

// ClientIPConfig configures ClientIP session affinity.
type ClientIPConfig struct {
	// TimeoutSeconds is 10800 (DefaultAffinityTimeout) when nil; the API
	// allows 1 to 86400.
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// ServiceNameLabel is the label of an EndpointSlice that names its Service
// (in the slice's namespace).
const ServiceNameLabel = "kubernetes.io/service-name"

// AddressType is the kind of address an EndpointSlice holds.
type AddressType string

// Address types. FQDN slices have nothing to translate to and are ignored.
const (
	AddressTypeIPv4 AddressType = "IPv4"
	AddressTypeIPv6 AddressType = "IPv6"
	AddressTypeFQDN AddressType = "FQDN"
)

// EndpointSlice is the part of a Kubernetes discovery.k8s.io/v1
// EndpointSlice a dataplane needs: the Service it belongs to (the
// ServiceNameLabel label), its address family, its endpoints with their
// addresses and conditions, and its ports.
type EndpointSlice struct {
	TypeMeta    `json:",inline"`
	ObjectMeta  `json:"metadata"`
	AddressType AddressType         `json:"addressType"`
	Endpoints   []SliceEndpoint     `json:"endpoints"`
	Ports       []EndpointSlicePort `json:"ports,omitempty"`
}

// SliceEndpoint is one endpoint of an EndpointSlice (discovery.k8s.io/v1
// Endpoint): a pod, usually, with its address. Only Addresses[0] is used,
// as kube-proxy does: the API holds every address of an endpoint
// equivalent.
type SliceEndpoint struct {
	Addresses  []string           `json:"addresses"`
	Conditions EndpointConditions `json:"conditions,omitzero"`
	// NodeName is the Node the endpoint runs on, when it is a pod; a
	// Service of InternalTrafficPolicy Local translates only to those of
	// the client's node.
	NodeName *string `json:"nodeName,omitempty"`
	// Hints are where the endpoint-slice controller wants the endpoint
	// used (a Service's trafficDistribution, or topology-aware routing):
	// see EndpointHints.
	Hints *EndpointHints `json:"hints,omitempty"`
}

// EndpointHints are the zones and nodes whose clients an endpoint should
// serve (discovery.k8s.io/v1 EndpointHints). Translation follows them as
// kube-proxy does: when every ready endpoint of a Service port has node
// hints and one names this node, only those; else when every one has zone
// hints and one names this node's zone, only those; else every endpoint.
type EndpointHints struct {
	ForZones []ForZone `json:"forZones,omitempty"`
	ForNodes []ForNode `json:"forNodes,omitempty"`
}

// ForZone names a zone (a topology.kubernetes.io/zone label value).
type ForZone struct {
	Name string `json:"name"`
}

// ForNode names a Node.
type ForNode struct {
	Name string `json:"name"`
}

// Node is what translation needs of the Node the agent runs on: its name,
// its zone (the topology.kubernetes.io/zone label; empty without it) and
// its addresses (its InternalIPs), where pods reach its NodePorts.
type Node struct {
	Name  string       `json:"name"`
	Zone  string       `json:"zone,omitempty"`
	Addrs []netip.Addr `json:"addresses,omitempty"`
}

// ZoneLabel is the Node label that names its zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// EndpointConditions are an endpoint's conditions. Nil Ready and Serving
// mean true, nil Terminating false, as kube-proxy reads them.
type EndpointConditions struct {
	Ready       *bool `json:"ready,omitempty"`
	Serving     *bool `json:"serving,omitempty"`
	Terminating *bool `json:"terminating,omitempty"`
}

// EndpointSlicePort is a port every endpoint of a slice listens on, named
// as the Service port it serves. Nil Name means "", nil Protocol TCP, as
// the API server defaults them; a nil Port is ignored.
type EndpointSlicePort struct {
	Name     *string   `json:"name,omitempty"`
	Protocol *Protocol `json:"protocol,omitempty"`
	Port     *int32    `json:"port,omitempty"`
}

// ServiceName returns the name of the Service the slice belongs to, "" when
// it has no ServiceNameLabel.
func (s *EndpointSlice) ServiceName() string { return s.Labels[ServiceNameLabel] }
