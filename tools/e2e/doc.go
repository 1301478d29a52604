// Command e2e brings lockstep's real-node test cluster up and down
// (internal/realnode): `make e2e-up` and `make e2e-down`.
//
//	go run ./tools/e2e up [--name e2e] [--nodes 2] [--dataplane ebpf|iptables] [--no-lockstep]
//	go run ./tools/e2e down [--name e2e]
//	go run ./tools/e2e status [--name e2e]
//	go run ./tools/e2e exec NODE -- COMMAND...
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
// It needs root, Linux, and what `make deps` installs.
package main
