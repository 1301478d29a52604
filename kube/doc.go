// Package kube is the root of lockstep's Kubernetes API surface:
//
//   - kube/apis/v1alpha1: the lockstep.dev custom resources, IPPool and
//     NodeIPAM, and the block release handshake between operator and agent
//     (its package documentation says who writes which field, and why).
//   - kube/client: a typed client for them on client-go's rest.Interface,
//     with the ListWatch helpers informers run on.
//   - kube/generate.sh: regenerates the DeepCopy code and the CRDs in
//     deploy/crds with a pinned controller-gen (make generate-kube).
//
// The tests in this directory check deploy/ against the code: the manifests
// decode strictly into the Kubernetes types, RBAC grants each side exactly
// its half of NodeIPAM, and the DaemonSet mounts the paths the agent and
// install-cni use by default.
//
// Nothing in the lockstep binary imports these packages yet: the agent runs
// only with --standalone. Linking any of k8s.io/apimachinery into the
// binary takes the CNI plugin's start-up past its budget (see
// cmd/lockstep/deps_test.go), so how Kubernetes mode joins the binary is
// still to be decided.
package kube
