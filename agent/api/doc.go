// Package api is the versioned wire contract between the lockstep CNI plugin
// and the node agent: request and response types, error codes, and a small
// client that speaks HTTP/JSON over the agent's unix socket.
//
// The package imports only the standard library on purpose. The CNI plugin
// starts on every pod ADD, so everything it links must be cheap to
// initialise; the agent side lives in package server.
//
// Every path is prefixed with the API version (/v1/...) and every request
// carries the header named by [VersionHeader]. An agent that does not speak
// the client's version answers with a clear error instead of guessing.
//
// An ADD is a two-step exchange so that a concurrent DEL can win:
//
//	POST /v1/add      reserve addresses; the endpoint is Pending
//	(plugin wires the pod network namespace)
//	POST /v1/confirm  Pending -> Ready, or CodeCancelled when a DEL arrived
//	POST /v1/abort    roll back a Pending endpoint and free its addresses
//
// DEL, GC, status and single-endpoint reads complete in one call.
package api
