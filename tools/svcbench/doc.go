// Command svcbench measures lockstep's Service translation and writes the
// results into its own section of BENCHMARKS.md, between the markers
// <!-- svcbench:begin --> and <!-- svcbench:end --> (`make bench`):
//
//   - Service change → applied: with the synthetic cluster of
//     test/benchcluster in an agent store (10k pods, 1k policies, 1k
//     Services of 10 backends), EndpointSlice updates timed from the store
//     write to enforcer.Sync returning, on local endpoints attached in a
//     throwaway netns, as tools/policybench times policy edits;
//   - the per-packet cost of translation: agent/datapath's
//     BenchmarkPrivilegedServiceVerdict run as a subprocess, translated packets
//     against untranslated ones. Its skbs carry CHECKSUM_NONE: on Linux
//     6.3 or later a tracked packet is rewritten there without a helper
//     call, as a pod's packet left to offload (CHECKSUM_PARTIAL) is; an
//     older kernel calls bpf_l4_csum_replace, twice when the port changes
//     (bpf/lib/nat.h), so the number depends on the kernel it ran on;
//   - the connection rate from a pod to a ClusterIP of 1 and of 100
//     backends on the real-node cluster (test/realnode), lockstep's
//     eBPF translation and host routing against kube-proxy's DNAT
//     (iptables mode), with lockstep routing the pod-IP traffic and with
//     the nodes' stacks routing everything, in interleaved rounds,
//     switched with lockstep-config's service-translation and
//     host-routing keys; the client and the backends run
//     tools/svcbench/connrate.
//
// It runs as root and everything it creates (namespaces, a bpffs mount,
// the cluster named by LOCKSTEP_E2E_NAME) goes at the end, also on
// failure or Ctrl-C.
//
//	sudo go run ./tools/svcbench [-out BENCHMARKS.md] [-rounds 12] [-seconds 3] [-only change|verdict|connrate]
package main
