// Package kubee2e runs the upstream Kubernetes end-to-end suite against a
// cluster and reads what it reported: `make e2e` runs the suite's
// NetworkPolicy specs on the real-node cluster (test/realnode) once per
// lockstep dataplane, and the real-node tests run a subset of them on
// every `make test`.
//
// The suite is e2e.test, the test binary of k8s.io/kubernetes/test/e2e at
// the release tools/kube-testenv pins (its build.sh builds it beside the
// cluster's binaries). Run starts it against a kubeconfig with the flags a
// local cluster without a cloud needs, writes its whole output to a log in
// the report directory while it reports each finished spec, and parses the
// JUnit report the suite writes there (ParseJUnit): the specs the focus
// selected, each passed, failed (with the first line of its failure) or
// skipped (with the reason).
//
// The suite only ever runs images the cluster already holds: every pod of
// the NetworkPolicy specs runs agnhost 2.53 with imagePullPolicy
// IfNotPresent, and the real-node cluster imports it, with the pause image
// and busybox, under their upstream names. A spec that needed another
// image would fail on its pull, and say so in its failure.
package kubee2e
