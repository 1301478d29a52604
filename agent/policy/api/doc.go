// Package api holds the Kubernetes objects lockstep's policy is written in
// and the numbers the dataplanes know peers by, without the compiler
// (lockstep.dev/lockstep/agent/policy), so that the store, the sources and
// the manifest loader can speak them alone.
//
// The object types (Namespace, Pod, NetworkPolicy, Service, EndpointSlice
// and their parts) mirror the Kubernetes v1 API field for field, with the
// same JSON names, so that a manifest written for Kubernetes parses
// unchanged. They are lockstep's own types rather than k8s.io/api's so
// that the compiler, the manifest loader and `lockstep probe` depend on no
// Kubernetes library and no API release: the agent converts the API
// server's objects once, where it watches them (agent/source), and
// everything after that speaks these types.
//
// Each object has Default, which fills in what the API server defaults,
// and Validate, which reports the first reason the API server would refuse
// it in the fields lockstep reads. A NetworkPolicy and a Service are valid
// exactly when they parse: [ParsePolicy] and [ParseService] return the
// forms the compiler works from (selectors ready to match, blocks and
// ports numbered), with errors that name the object and the field.
//
// [Peer], [Direction] and the Proto constants are the numbers the compiler,
// the store (which assigns pod identities, see [IdentityKey]) and both
// dataplanes share.
//
// Import it as policyapi: lockstep.dev/lockstep/agent/api, the agent's
// socket API, is the other api package most of its importers use.
package api
