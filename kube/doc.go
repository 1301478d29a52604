// Package kube is the root of lockstep's Kubernetes API surface:
//
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
// initialisers: cmd/lockstep/deps_test.go measures it and keeps client-go's
// clientset, whose scheme registers every API group, out of the binary,
// and its tools/cache and tools/clientcmd, which kube/client replaces.
package kube
