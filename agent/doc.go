// Package agent assembles the lockstep node agent: the store, the state
// file, the endpoints service, the CNI API on a unix socket and the
// health/metrics listener, and runs them until its context ends.
//
// The agent is the only writer of node state. Sources (today the CNI
// plugin; later manifests and Kubernetes informers) change it through store
// write transactions; the dataplane is driven from what those commit.
package agent
