// Package kube is the root of lockstep's Kubernetes API surface:
//
//   - kube/api: lockstep's own Kubernetes API types (core/v1 Pods,
//     Namespaces, Nodes, Services and Events, NetworkPolicy, EndpointSlice,
//     Lease) with their object metadata, request options, status errors
//     and watch events, in place of k8s.io/api and apimachinery.
//   - kube/apis/v1alpha1: the lockstep.dev custom resources, IPPool and
//     NodeIPAM, and the block release handshake between operator and agent
//     (its package documentation says who writes which field, and why).
//   - kube/client: lockstep's own REST client (in place of client-go's),
//     a typed client for the custom resources on it, the Informer every
//     lockstep process caches API objects with, and the kubeconfig loader.
//   - agent/source: the agent's Kubernetes source, informers on Pods,
//     Namespaces, NetworkPolicies, Nodes and NodeIPAMs feeding the agent's
//     store and its routes to other nodes' blocks.
//   - agent/nodeipam: the agent's half of cluster IPAM.
//   - kube/operator: the operator's half.
//   - kube/generate.sh: regenerates the DeepCopy code and the CRDs in
//     deploy/crds with a pinned controller-gen (make generate-kube).
//
// The tests in this directory check deploy/ against the code: the manifests
// decode strictly into the Kubernetes types, RBAC grants each side exactly
// its half of NodeIPAM, and the DaemonSet mounts the paths the agent and
// install-cni use by default.
//
// They are linked into the one lockstep binary (agent in Kubernetes mode,
// `lockstep operator`), so the CNI plugin's start-up pays for their package
// initialisers: cmd/lockstep/deps_test.go measures it and keeps every
// k8s.io and sigs.k8s.io package out of the binary (client-go, k8s.io/api
// and apimachinery register types, codecs and regexps in init); kube/api
// and kube/client replace them. The tests may use them: decoding deploy/
// strictly into the upstream types is how the manifests are checked.
package kube
