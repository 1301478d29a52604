// Package agent assembles the lockstep node agent: the store, the state
// file, the endpoints service, the CNI API on a unix socket and the
// health/metrics listener, and runs them until its context ends.
//
// The agent is the only writer of node state. Sources change it through
// store write transactions: the CNI plugin (endpoints), and the policy
// source of the mode the agent runs in — a manifests directory with
// --standalone (package agent/manifests), or in Kubernetes mode the API
// server's informers (package agent/source) together with the node's
// NodeIPAM blocks (package agent/nodeipam) and the routes to other nodes'
// blocks (package agent/routes). The dataplane is driven from what those
// commit.
//
// Run is a short sequence of phases on a node (node.go): serve the probes,
// open the state file, start the mode's half, open the dataplane, restore,
// run the loops, await the pools, serve. What differs between the modes is
// one interface, mode, with a standalone and a Kubernetes implementation;
// the dataplane is an enforcer.Dataplane that may also be a Counter, a
// MetricsWriter, a Compactor or an io.Closer, each found by a type
// assertion.
package agent
