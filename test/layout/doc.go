// Package layout holds the test that keeps lockstep's top-level folders in
// one order: a package imports only packages of its own folder or of a
// folder below its own in [Order]. It has no code of its own.
//
// The order is the architecture README's layout table describes:
//
//	internal  small libraries with no lockstep imports of their own
//	bpfmaps   the layout of the eBPF maps, shared by the agent and the CLI
//	kube      the API types, the client and the operator
//	agent     the node agent, its Kubernetes half included
//	cni       the CNI plugin and install-cni
//	probe     `lockstep probe` and the simulated node it builds pods in
//	test      test and benchmark support
//	cmd       the one binary
//	tools     the demo, the benchmarks and the end-to-end driver
//
// Tests may import more: the harnesses of test/ and probe/nodesim, and
// the packages whose behaviour they check together with their own.
package layout
