// Package api is the root of lockstep's own Kubernetes API types: the
// handful of kinds and fields the agent and the operator read and write,
// with the JSON names of the Kubernetes API, and the small machinery around
// them (object metadata, options, status errors, watch events).
//
// lockstep is one binary, and the CNI plugin is that binary started by the
// container runtime for every pod: every package it links runs its
// initialisers on every start. The Kubernetes libraries register hundreds of
// types, protobuf descriptors and codecs when they start; these packages
// register nothing and hold no global tables, so the plugin's start does
// not pay for the agent's API client (cmd/lockstep/deps_test.go keeps it
// so).
//
// The types are subsets: a field lockstep never reads is not declared and
// is dropped when the object is decoded. That is safe only for objects
// lockstep never writes back whole. The kinds it updates (Lease, and its
// own IPPool and NodeIPAM) declare every field of their kind, and Event,
// which it only creates, declares what it sets.
//
// The layout follows the Kubernetes packages (core/v1, meta/v1, ...), so a
// reader who knows those finds the same names here.
package api
