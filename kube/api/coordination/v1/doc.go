// Package v1 is the Kubernetes coordination.k8s.io/v1 Lease, whole: the
// operator's leader election reads and writes it back.
package v1
