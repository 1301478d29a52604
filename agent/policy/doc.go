// Package policy holds lockstep's model of Kubernetes NetworkPolicy and the
// compiler that turns it into the dataplane's desired state.
//
// The object types (Namespace, Pod, NetworkPolicy and their parts) mirror
// the Kubernetes v1 API field for field, with the same JSON names, so that
// a manifest written for Kubernetes parses unchanged. lockstep keeps its own
// copies instead of importing k8s.io/api because this package is linked into
// the one binary whose CNI plugin starts on every pod ADD, and the Kubernetes
// API packages cost start-up time there (see cmd/lockstep/deps_test.go).
//
// The compiler is pure: given a consistent snapshot (namespaces, pods with
// their addresses and identities, policies, local endpoints) it computes a
// [Desired] state. It never reads the store and never touches the kernel; the
// agent feeds it from one committed store transaction and hands the result to
// the dataplane, which applies it in one step.
package policy
