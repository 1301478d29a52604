package datapath

import policyapi "lockstep.dev/lockstep/agent/policy/api"

// PolicyVerdict is what one policy decided in one direction on this node
// since the agent started: Allowed, the new connections its rules allowed
// (the connection's first packet; the established packets after it are
// not counted), and Denied, the packets dropped by default deny at the
// local endpoints it isolates in Dir (every policy isolating an endpoint
// counts its drops).
type PolicyVerdict struct {
	Namespace, Name string
	Dir             policyapi.Direction
	Allowed, Denied uint64
}
