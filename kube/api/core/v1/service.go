package v1

import (
	"lockstep.dev/lockstep/kube/api/intstr"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
)

// Service is a Service: its frontends, ports, affinity and traffic
// policies.
type Service struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServiceSpec   `json:"spec,omitempty"`
	Status            ServiceStatus `json:"status,omitempty"`
}

// ServiceList is a list of Services.
type ServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Service `json:"items"`
}

// ServiceSpec is the part of a Service's spec lockstep reads.
type ServiceSpec struct {
	Ports                    []ServicePort                 `json:"ports,omitempty"`
	Selector                 map[string]string             `json:"selector,omitempty"`
	ClusterIP                string                        `json:"clusterIP,omitempty"`
	ClusterIPs               []string                      `json:"clusterIPs,omitempty"`
	Type                     ServiceType                   `json:"type,omitempty"`
	ExternalIPs              []string                      `json:"externalIPs,omitempty"`
	SessionAffinity          ServiceAffinity               `json:"sessionAffinity,omitempty"`
	LoadBalancerIP           string                        `json:"loadBalancerIP,omitempty"`
	LoadBalancerSourceRanges []string                      `json:"loadBalancerSourceRanges,omitempty"`
	ExternalName             string                        `json:"externalName,omitempty"`
	ExternalTrafficPolicy    ServiceExternalTrafficPolicy  `json:"externalTrafficPolicy,omitempty"`
	PublishNotReadyAddresses bool                          `json:"publishNotReadyAddresses,omitempty"`
	SessionAffinityConfig    *SessionAffinityConfig        `json:"sessionAffinityConfig,omitempty"`
	IPFamilies               []IPFamily                    `json:"ipFamilies,omitempty"`
	IPFamilyPolicy           *IPFamilyPolicy               `json:"ipFamilyPolicy,omitempty"`
	InternalTrafficPolicy    *ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`
	TrafficDistribution      *string                       `json:"trafficDistribution,omitempty"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name        string             `json:"name,omitempty"`
	Protocol    Protocol           `json:"protocol,omitempty"`
	AppProtocol *string            `json:"appProtocol,omitempty"`
	Port        int32              `json:"port"`
	TargetPort  intstr.IntOrString `json:"targetPort,omitzero"`
	NodePort    int32              `json:"nodePort,omitempty"`
}

// ServiceType is how a Service is exposed.
type ServiceType string

// The types of Services.
const (
	ServiceTypeClusterIP    ServiceType = "ClusterIP"
	ServiceTypeNodePort     ServiceType = "NodePort"
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
	ServiceTypeExternalName ServiceType = "ExternalName"
)

// ServiceAffinity is a Service's session affinity.
type ServiceAffinity string

// The session affinities.
const (
	ServiceAffinityClientIP ServiceAffinity = "ClientIP"
	ServiceAffinityNone     ServiceAffinity = "None"
)

// SessionAffinityConfig holds the ClientIP affinity's timeout.
type SessionAffinityConfig struct {
	ClientIP *ClientIPConfig `json:"clientIP,omitempty"`
}

// ClientIPConfig is the ClientIP affinity's timeout.
type ClientIPConfig struct {
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// ServiceExternalTrafficPolicy is where external traffic may go.
type ServiceExternalTrafficPolicy string

// The external traffic policies.
const (
	ServiceExternalTrafficPolicyCluster ServiceExternalTrafficPolicy = "Cluster"
	ServiceExternalTrafficPolicyLocal   ServiceExternalTrafficPolicy = "Local"
)

// ServiceInternalTrafficPolicy is where traffic from the cluster may go.
type ServiceInternalTrafficPolicy string

// The internal traffic policies.
const (
	ServiceInternalTrafficPolicyCluster ServiceInternalTrafficPolicy = "Cluster"
	ServiceInternalTrafficPolicyLocal   ServiceInternalTrafficPolicy = "Local"
)

// IPFamily is an address family.
type IPFamily string

// The address families.
const (
	IPv4Protocol IPFamily = "IPv4"
	IPv6Protocol IPFamily = "IPv6"
)

// IPFamilyPolicy is how many families a Service asks for.
type IPFamilyPolicy string

// The family policies.
const (
	IPFamilyPolicySingleStack      IPFamilyPolicy = "SingleStack"
	IPFamilyPolicyPreferDualStack  IPFamilyPolicy = "PreferDualStack"
	IPFamilyPolicyRequireDualStack IPFamilyPolicy = "RequireDualStack"
)

// ServiceStatus is a Service's load balancer.
type ServiceStatus struct {
	LoadBalancer LoadBalancerStatus `json:"loadBalancer,omitempty"`
}

// LoadBalancerStatus lists a load balancer's addresses.
type LoadBalancerStatus struct {
	Ingress []LoadBalancerIngress `json:"ingress,omitempty"`
}

// LoadBalancerIngress is one address of a load balancer.
type LoadBalancerIngress struct {
	IP       string              `json:"ip,omitempty"`
	Hostname string              `json:"hostname,omitempty"`
	IPMode   *LoadBalancerIPMode `json:"ipMode,omitempty"`
}

// LoadBalancerIPMode is how a load balancer delivers its traffic.
type LoadBalancerIPMode string

// The load balancer IP modes.
const (
	LoadBalancerIPModeVIP   LoadBalancerIPMode = "VIP"
	LoadBalancerIPModeProxy LoadBalancerIPMode = "Proxy"
)
