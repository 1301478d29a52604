// Package v1 is the Kubernetes networking.k8s.io/v1 NetworkPolicy, as
// lockstep reads it.
package v1
