// Command pause is the process of a pod sandbox: it holds the pod's
// namespaces open and does nothing else, like registry.k8s.io/pause.
//
// It waits for SIGTERM or SIGINT and then exits 0. As the first process of
// a pod that shares its PID namespace it is every orphan's parent, so it
// reaps each child that exits (SIGCHLD) rather than leave zombies. `pause
// -v` prints its version. It is built static (CGO_ENABLED=0) and put at
// /pause in an image by `go run ./tools/image pause`.
package main
