// Package kube will hold lockstep's Kubernetes API types (the lockstep.dev
// IPPool and NodeIPAM custom resources) and the informer source that feeds
// the agent's store in Kubernetes mode.
//
// Not implemented yet: today the agent runs only with --standalone.
package kube
