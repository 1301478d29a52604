package v1

import "lockstep.dev/lockstep/kube/api/runtime"

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Pod) DeepCopy() *Pod { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *PodList) DeepCopy() *PodList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *PodSpec) DeepCopy() *PodSpec { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *PodStatus) DeepCopy() *PodStatus { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Namespace) DeepCopy() *Namespace { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *NamespaceList) DeepCopy() *NamespaceList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Node) DeepCopy() *Node { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *NodeList) DeepCopy() *NodeList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Service) DeepCopy() *Service { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *ServiceList) DeepCopy() *ServiceList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *ServiceSpec) DeepCopy() *ServiceSpec { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Event) DeepCopy() *Event { return runtime.DeepCopy(o) }
