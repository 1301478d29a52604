// Command podstartbench measures pod start on a real node (`make bench`):
// N pods applied at once to one node of the real-node cluster
// (test/realnode), the time from the apply until every one is Ready,
// with lockstep as the node's CNI against the reference bridge +
// host-local plugins, in interleaved rounds on the same node in the same
// run. It writes its section of BENCHMARKS.md.
//
// The reference plugins get the node by a config list that sorts before
// lockstep's (05-bridge.conflist), which containerd then uses for new pods;
// removing it gives the node back to lockstep. Everything else (kubelet,
// containerd, images, the scheduler, the agent running) is the same.
//
//	sudo go run ./tools/podstartbench [-pods 60] [-rounds 3] [-out BENCHMARKS.md]
package main
