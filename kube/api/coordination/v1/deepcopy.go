package v1

import "lockstep.dev/lockstep/kube/api/runtime"

// DeepCopy returns a copy of o that shares nothing with it.
func (o *Lease) DeepCopy() *Lease { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *LeaseList) DeepCopy() *LeaseList { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *LeaseSpec) DeepCopy() *LeaseSpec { return runtime.DeepCopy(o) }
