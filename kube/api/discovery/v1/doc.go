// Package v1 is the Kubernetes discovery.k8s.io/v1 EndpointSlice, as
// lockstep reads it.
package v1
