package v1

import metav1 "lockstep.dev/lockstep/kube/api/meta/v1"

// Pod is a pod: where it runs, its containers' ports, its addresses and
// phase.
type Pod struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodSpec   `json:"spec,omitempty"`
	Status            PodStatus `json:"status,omitempty"`
}

// PodList is a list of pods.
type PodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pod `json:"items"`
}

// PodSpec is the part of a pod's spec lockstep reads.
type PodSpec struct {
	NodeName       string      `json:"nodeName,omitempty"`
	HostNetwork    bool        `json:"hostNetwork,omitempty"`
	InitContainers []Container `json:"initContainers,omitempty"`
	Containers     []Container `json:"containers"`
}

// Container is a container's name and ports.
type Container struct {
	Name          string                  `json:"name"`
	Image         string                  `json:"image,omitempty"`
	Ports         []ContainerPort         `json:"ports,omitempty"`
	RestartPolicy *ContainerRestartPolicy `json:"restartPolicy,omitempty"`
}

// ContainerRestartPolicy is an init container's restart policy; Always
// makes it a sidecar, whose ports are the pod's while it runs.
type ContainerRestartPolicy string

// ContainerRestartPolicyAlways makes an init container a sidecar.
const ContainerRestartPolicyAlways ContainerRestartPolicy = "Always"

// ContainerPort is a port a container declares.
type ContainerPort struct {
	Name          string   `json:"name,omitempty"`
	HostPort      int32    `json:"hostPort,omitempty"`
	ContainerPort int32    `json:"containerPort"`
	Protocol      Protocol `json:"protocol,omitempty"`
	HostIP        string   `json:"hostIP,omitempty"`
}

// Protocol is a transport protocol.
type Protocol string

// The protocols of ports.
const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// PodStatus is a pod's phase, addresses and conditions.
type PodStatus struct {
	Phase      PodPhase       `json:"phase,omitempty"`
	Conditions []PodCondition `json:"conditions,omitempty"`
	HostIP     string         `json:"hostIP,omitempty"`
	HostIPs    []HostIP       `json:"hostIPs,omitempty"`
	PodIP      string         `json:"podIP,omitempty"`
	PodIPs     []PodIP        `json:"podIPs,omitempty"`
}

// PodPhase is where a pod is in its life.
type PodPhase string

// The phases of a pod.
const (
	PodPending   PodPhase = "Pending"
	PodRunning   PodPhase = "Running"
	PodSucceeded PodPhase = "Succeeded"
	PodFailed    PodPhase = "Failed"
	PodUnknown   PodPhase = "Unknown"
)

// PodConditionType names a pod condition.
type PodConditionType string

// PodReady: the pod's containers are ready.
const PodReady PodConditionType = "Ready"

// ConditionStatus is whether a core condition holds.
type ConditionStatus string

// The statuses of a core condition.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// PodCondition is one condition of a pod.
type PodCondition struct {
	Type   PodConditionType `json:"type"`
	Status ConditionStatus  `json:"status"`
}

// PodIP is one of a pod's addresses.
type PodIP struct {
	IP string `json:"ip"`
}

// HostIP is one of the addresses of a pod's node.
type HostIP struct {
	IP string `json:"ip"`
}
