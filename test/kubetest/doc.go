// Package kubetest runs a real kube-apiserver, backed by a real etcd, for
// lockstep's integration tests.
//
// A fake API server answers what its author expected; the real one also
// enforces what lockstep must survive: optimistic concurrency on
// resourceVersion, admission, RBAC, watch semantics, a restart that drops
// every watch. Tests that need it are named TestKube... and begin with
// [Start], which returns an [Env] whose Host, Token, CAFile and Kubeconfig
// are ready for kubectl, for [net/http] ([Env.HTTPClient]) and for
// client-go (kube/client.LoadConfig reads Kubeconfig). Nothing else runs: there is no
// scheduler, no controller-manager and no kubelet, so a test that wants a
// pod on a node creates it with spec.nodeName already set, and a pod's
// status changes only when the test writes it.
//
// # The gate
//
// Start skips unless LOCKSTEP_KUBE=1 or LOCKSTEP_PRIVILEGED=1 (the switch
// CI sets for [lockstep.dev/lockstep/test/testenv]); neither needs
// root. Once enabled, a missing etcd or a failed build is a test failure,
// never a skip, so a CI run cannot turn green by testing nothing.
//
// # The binaries
//
// etcd comes from Debian's etcd-server package (`make deps`). kube-apiserver
// and kubectl are built from the Kubernetes release pinned in the separate
// module tools/kube-testenv by its build.sh, into
// ${XDG_CACHE_HOME:-$HOME/.cache}/lockstep/kube-testenv/<version>-<hash> (or
// $LOCKSTEP_KUBE_CACHE), outside the repository, together with the rest of
// the real-node cluster's binaries (test/realnode). Start runs that
// script: when the binaries are there it answers at once, when they are
// not it builds them, which takes about ten minutes on two cores with a
// cold Go build cache. Run tools/kube-testenv/build.sh (or the Makefile target that
// calls it) ahead of `go test` to keep that build out of a test's time
// budget.
//
// Debian's etcd is 3.4, older than the 3.5 a production cluster runs; the
// apiserver notices that 3.4 cannot answer watch progress requests and
// serves consistent lists from etcd instead of its watch cache. What
// clients see is the same.
//
// # One environment
//
// Each Env is its own etcd (data in a fresh temporary directory) and its
// own kube-apiserver, both listening only on 127.0.0.1, on ports picked
// free at start. The apiserver authenticates one static bearer token whose
// user is in system:masters, authorizes with RBAC, signs service-account
// tokens with a key generated for the Env, serves a self-signed certificate
// from --cert-dir, and runs without the ServiceAccount admission plugin, so
// pods can be created with no controller to make their service accounts.
// Starting takes about three seconds, most of it the apiserver creating
// its bootstrap RBAC roles; a package whose tests can share one Env starts
// it once in TestMain with [StartEnv]. [Env.RestartAPIServer] restarts only
// the apiserver, on the same port, certificate and etcd, as an upgrade or
// crash would.
//
// Both processes are started with a parent-death signal from a thread that
// lives as long as the test binary, so a test binary killed by a timeout
// takes them with it; temporary directories such a binary leaves behind are
// removed by the next Start.
package kubetest
