// Package twonode holds lockstep's two-node integration test: one real
// kube-apiserver (test/kubetest) and two simulated nodes (network
// namespaces from probe/nodesim, joined by a veth pair), each running
// `lockstep agent` in Kubernetes mode, with pods wired through the real CNI
// plugin on each node.
//
// The test plays the parts of a cluster that do not run here: it creates
// the Node objects with their InternalIPs, the IPPool and the NodeIPAMs
// (with the controller owner reference the operator would set), and, as a
// kubelet would, creates each Pod bound to its node before its CNI ADD and
// writes its status.podIPs after. Each node reaches the API server through
// a relay the test opens on 127.0.0.1 inside the node's namespace, so the
// kubeconfig is the kubetest one unchanged and the machine's own network is
// never touched.
//
// It runs under the gate of both its parents: LOCKSTEP_PRIVILEGED=1, as
// root. There is nothing to import.
package twonode
