// Package v1 is the metadata every API object carries (TypeMeta,
// ObjectMeta, ListMeta), its times, label selectors, conditions, the
// options of API requests and the Status the API server answers failures
// with: the subset of the Kubernetes meta/v1 group that lockstep uses.
package v1
