package v1

import "lockstep.dev/lockstep/kube/api/runtime"

// DeepCopy returns a copy of o that shares nothing with it.
func (o *NetworkPolicy) DeepCopy() *NetworkPolicy { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *NetworkPolicyList) DeepCopy() *NetworkPolicyList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *NetworkPolicySpec) DeepCopy() *NetworkPolicySpec { return runtime.DeepCopy(o) }
