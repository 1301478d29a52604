// Package benchcluster is the synthetic cluster lockstep's benchmark tools
// load into an agent store (tools/policybench, tools/svcbench), and the
// node they time changes on: its local pods and their veths, and the
// timing of one store write through the enforcer until the dataplane has
// applied it.
//
// The cluster is 50 namespaces × 20 apps × 10 replicas: 10k remote pods,
// one identity and one NetworkPolicy per app (1k each), and, when asked,
// one ClusterIP Service per app whose EndpointSlice lists the app's 10
// replicas (1k Services, 10k backends). Its shape is what the compiler
// meets in a real cluster: team-labelled namespaces, deployment-like pods
// with named ports, policies with pod and namespace selectors, numeric,
// ranged and named ports, DNS egress and ipBlocks with excepts.
package benchcluster
