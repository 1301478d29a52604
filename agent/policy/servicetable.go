package policy

import policyapi "lockstep.dev/lockstep/agent/policy/api"

// ServiceTable returns what each frontend of svcs translates to given the
// slices sl, exactly as Compile computes Desired.Services: agent/explain
// translates a ClusterIP with it, so that its answer for a Service is the
// dataplanes' translation followed by policy, not a second reading of the
// EndpointSlice rules. Nil when there is no frontend; an invalid Service
// is an error, as it fails Compile. node and zone are as in Snapshot.Node
// and Snapshot.Zone.
func ServiceTable(svcs []*policyapi.Service, sl []*policyapi.EndpointSlice, node, zone string) (map[ServiceFrontend]*ServiceEntry, error) {
	return compileServices(svcs, sl, policyapi.Node{Name: node, Zone: zone})
}
