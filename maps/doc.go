// Package maps will hold one Go package per pinned BPF map of the policy
// dataplane, and back `lockstep maps list|dump`.
//
// Not implemented yet: the eBPF dataplane arrives with the policy issue.
package maps
