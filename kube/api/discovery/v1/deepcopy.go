package v1

import "lockstep.dev/lockstep/kube/api/runtime"

// DeepCopy returns a copy of o that shares nothing with it.
func (o *EndpointSlice) DeepCopy() *EndpointSlice { return runtime.DeepCopy(o) }

// DeepCopy returns a copy of o that shares nothing with it.
func (o *EndpointSliceList) DeepCopy() *EndpointSliceList { return runtime.DeepCopy(o) }
