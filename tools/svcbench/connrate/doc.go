// Command connrate is the program in the pods of tools/svcbench's
// connection-rate benchmark: the backends serve with it, and the client
// measures with it, run by `kubectl exec` in its pod.
//
//	connrate serve [-listen :8080]
//	connrate wait
//	connrate connect -addr 10.96.0.20:80 [-duration 5s] [-workers 8] [-ports 1024-65535]
//
// serve accepts connections and closes each at once; wait does nothing
// until SIGTERM (the client pod's process). connect opens and closes TCP
// connections to addr from -workers goroutines for -duration, with
// nothing but the system calls (socket, bind, a blocking connect, close),
// and prints one JSON line: the connections, the failures, the rate and
// how long connect took (p50, p99, max).
//
// Each connection binds a source port of -ports that no other connection
// of the run used, and the run ends early once they are used up: every
// connection is new to the connection trackers on its way, as those of
// many clients are, and none is decided by an entry an earlier connection
// of the same tuple left. Each is closed with SO_LINGER 0, so it ends
// with a reset instead of a FIN exchange: no socket stays in TIME_WAIT,
// and the node's conntrack keeps only short-lived CLOSE entries.
//
// It is built static (CGO_ENABLED=0) and wrapped into an image by
// `go run ./tools/image binary`; tools/svcbench does both.
package main
