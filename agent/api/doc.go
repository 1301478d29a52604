// Package api is the versioned wire contract between the lockstep CNI plugin
// and the node agent: request and response types, error codes, and a small
// client for the agent's unix socket.
//
// The protocol is JSON lines: the client writes one Request object and a
// newline, the agent answers with one Response line, and a connection
// carries any number of such exchanges in turn. It is deliberately not
// HTTP: on the pod ADD path the plugin makes its call from a process that
// has just started, and an HTTP exchange measured about 0.45 ms here
// against 0.06 ms for a line on an open connection; and a request must be
// able to carry a descriptor. To talk to an agent by
// hand: socat - UNIX-CONNECT:/run/lockstep/lockstep.sock, then type
// {"v":"v1","op":"status"}.
//
// The package imports only the standard library on purpose. The CNI plugin
// starts on every pod ADD, so everything it links must be cheap to
// initialise; the agent side lives in package server.
//
// Every request carries [Version]. An agent that does not speak the
// client's version answers with a clear error instead of guessing.
//
// The plugin does each of ADD, DEL and CHECK in one exchange, and the
// agent does the whole verb before it answers:
//
//	cni-add    the pod's network namespace travels with the request as a
//	           descriptor (SCM_RIGHTS ancillary data on the request's
//	           bytes); the agent reserves addresses, wires the veth into
//	           that namespace, confirms (the policy is in force) and
//	           answers with the interfaces, addresses and routes; on any
//	           failure it has undone all of it
//	cni-del    the agent deletes the host link, releases, and deletes the
//	           link again if an ADD in flight wired it meanwhile
//	cni-check  the namespace travels as for cni-add (or not at all when it
//	           is gone); the agent answers its record and the differences
//	           the kernel shows
//
// A request carries at most one descriptor (MaxFDs), and only these
// operations take one. The agent trusts no descriptor: it checks that it
// is an nsfs handle on a network namespace other than its own, and closes
// every descriptor it receives, refused or not. The client sends one
// request at a time on a connection; descriptors that arrive with bytes of
// two requests are refused.
//
// An agent older than these operations answers them with
// CodeIncompatibleVersion ("no operation"); the plugin turns that into
// CNI code 11 with the advice to upgrade the agent and the plugin
// together. The reservation steps alone (add, confirm, abort) stay served
// for the allocation benchmarks and for a plugin one release older; the
// plugin no longer uses them.
//
// DEL (release only), GC, status and single-endpoint reads complete in one
// call.
package api
