// Command e2e brings lockstep's real-node test cluster up and down
// (test/realnode): `make e2e-up` and `make e2e-down`.
//
//	go run ./tools/e2e up [--name e2e] [--nodes 2] [--dataplane ebpf|iptables] [--no-lockstep]
//	go run ./tools/e2e down [--name e2e]
//	go run ./tools/e2e status [--name e2e]
//	go run ./tools/e2e exec NODE -- COMMAND...
//	go run ./tools/e2e netpol [--name e2e] [--dataplanes ebpf,iptables] [--focus REGEXP]... [--out E2E.md] [--keep]
//
// --name (default $LOCKSTEP_E2E_NAME, else e2e) picks the cluster: one per
// name runs on a machine.
//
// up builds what it needs (the Kubernetes binaries once, the images every
// time), brings up a control plane and two nodes in network namespaces,
// imports the images into each node's containerd, and installs lockstep the
// way a user does: `kubectl apply -k deploy` and `kubectl apply -f
// deploy/examples/ippools.yaml`. It prints the kubeconfig to use. down
// removes everything, also after a failed up. The hidden subcommand init is
// each host's PID 1 (realnode.RunInit).
//
// netpol (`make e2e`) runs the NetworkPolicy specs of the upstream
// end-to-end suite (e2e.test, which `make kube-testenv` builds) on the
// running cluster of the name, or on one it brings up (and takes down
// after, unless --keep), once per dataplane: it switches lockstep's
// dataplane through the lockstep-config ConfigMap and a rolling restart,
// waits until every agent enforces through it, and runs the suite (package
// kubee2e). The SCTP specs are skipped only when this kernel has no SCTP.
// Each dataplane's results (counts, every failed spec with the first line
// of its failure and the probes that answered wrong, every skipped one
// with why) become its section of E2E.md; the suite's log, its JUnit
// report and the agents' logs stay in bin/e2e-netpol/DATAPLANE. A cluster
// it found running is switched back to the dataplane it ran. It exits
// non-zero when a spec failed.
//
// It needs root, Linux, and what `make deps` installs.
package main
