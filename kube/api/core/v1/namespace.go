package v1

import metav1 "lockstep.dev/lockstep/kube/api/meta/v1"

// Namespace is a namespace: lockstep reads its labels.
type Namespace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            NamespaceStatus `json:"status,omitempty"`
}

// NamespaceStatus is a namespace's phase.
type NamespaceStatus struct {
	Phase string `json:"phase,omitempty"`
}

// NamespaceList is a list of namespaces.
type NamespaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Namespace `json:"items"`
}
