package policy

import policyapi "lockstep.dev/lockstep/agent/policy/api"

// ServiceTable returns what each frontend of svcs translates to given the
// slices sl, exactly as Compile computes Desired.Services for the node at
// (Snapshot.Node, Snapshot.Zone and Snapshot.NodeAddrs): agent/explain
// translates a ClusterIP with it, so that its answer for a Service is the
// dataplanes' translation followed by policy, not a second reading of the
// EndpointSlice rules. Nil when there is no frontend; an invalid Service
// is an error, as it fails Compile. over says, by namespace, why l leaves
// a namespace's Services untranslated (Desired.ServicesOverCapacity).
func ServiceTable(svcs []*policyapi.Service, sl []*policyapi.EndpointSlice, at policyapi.Node, l Limits) (_ map[ServiceFrontend]*ServiceEntry, over map[string]string, _ error) {
	return compileServices(svcs, sl, at, l)
}
