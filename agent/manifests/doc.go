// Package manifests reads Kubernetes objects — Namespaces, Pods and
// NetworkPolicies — from a directory of YAML or JSON files, so a node can
// enforce policy without an API server (the standalone mode and the demo)
// and tests can describe a cluster as files.
//
// A directory is read whole: every *.yaml, *.yml and *.json file in it (not
// in subdirectories; names starting with '.' are skipped, so editor swap
// and lock files never count), each holding one or more documents
// separated by "---" lines, each document an object or a v1 List of
// objects. Objects are defaulted as the API server would default them
// (namespace "default", TCP protocols, policy types, the
// kubernetes.io/metadata.name label) and validated; an object the API
// server would reject fails the load with an error naming the file and
// the document. Kinds lockstep does not use are skipped and reported in
// [Objects.Warnings].
//
// Objects without a metadata.uid get one derived from kind, namespace and
// name, so a reload of unchanged files yields the same UIDs.
//
// [Watch] follows the directory and hands its caller each complete new
// set of objects. A bad edit is reported and the last good set stays in
// force: a typo in one file must not drop every policy on the node.
//
// The YAML decoder (sigs.k8s.io/yaml) is not free to initialise; the
// package is meant for the agent, and cmd/lockstep's deps test decides
// whether it may be linked into the binary the CNI plugin shares.
package manifests
