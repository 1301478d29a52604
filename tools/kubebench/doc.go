// Command kubebench measures lockstep's IPAM in Kubernetes mode: 1000 pods
// ADDed on one node while the API server, the operator and the agent run,
// and how many write requests the API server serves for them.
//
//	sudo go run ./tools/kubebench -out BENCHMARKS.md   (or: make bench)
//
// The measurement itself is test/twonode's
// BenchmarkKubePrivilegedPodBurst, which reuses the two-node integration
// test's cluster (a real etcd and kube-apiserver from test/kubetest, the
// operator and the agent as the built lockstep binary, the node in a network
// namespace, pods wired through lockstep-cni); kubebench runs it as
// `go test -bench` would, reads the metrics it reports and rewrites its own
// section of the output file.
package main
