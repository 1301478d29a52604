// Command policybench measures lockstep's policy dataplane and writes the
// results into its own section of BENCHMARKS.md, between the markers
// <!-- policybench:begin --> and <!-- policybench:end -->, as
// tools/cnibench does for CNI ADD/DEL.
//
// One run measures, on one synthetic cluster of 10k remote pods and 1k
// NetworkPolicies (test/benchcluster):
//
//   - the in-kernel cost of one verdict of the to_pod program, by running
//     agent/datapath's BenchmarkPrivilegedVerdict and BenchmarkPrivilegedVerdictFloor (the
//     cost of BPF_PROG_TEST_RUN itself) as a subprocess and reading their
//     ns/verdict metric;
//   - the latency from writing one policy edit to the store until
//     enforcer.Sync returns with the maps applied, on 20 local endpoints
//     attached to real veths in a throwaway netns, split into Sync's
//     phases (change log, incremental compile, apply) and compared with a
//     full compilation; and the same for remote pods and new identities
//     coming and going;
//   - TCP throughput between two pods (iperf3) with the BPF filters on and
//     with them removed;
//   - the agent's resident memory with the cluster loaded from --manifests.
//
// Everything privileged happens in network namespaces and bpffs mounts it
// creates and removes; run it as root, usually through `make bench`.
package main
