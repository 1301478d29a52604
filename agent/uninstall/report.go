package uninstall

import (
	"errors"
	"fmt"

	"lockstep.dev/lockstep/agent/iptables"
)

// ErrAgentRunning: an agent answers on the socket; it would put back what
// Run removes.
var ErrAgentRunning = errors.New("a lockstep agent is running")

// Options says where the agent kept its state on this node.
type Options struct {
	// BPFRoot is the agent's --bpf-root.
	BPFRoot string
	// StateDir is the agent's --state-dir.
	StateDir string
	// Socket is the agent's --socket.
	Socket string
	// PurgeState removes the state file and StateDir; otherwise they stay,
	// for an agent installed again to find its allocations.
	PurgeState bool
	// Runner runs the iptables and ipset tools; nil means
	// iptables.ExecRunner.
	Runner iptables.Runner
}

// Report is what Run did.
type Report struct {
	// Removed describes each thing Run removed, one line each.
	Removed []string
	// Kept are things Run found and deliberately left, with the reason.
	Kept []string
	// Skipped are parts Run could not look at, with the reason (an
	// iptables mode whose tools are not installed).
	Skipped []string
	// Errors are the things Run could not remove.
	Errors []error
}

func (r *Report) removed(format string, args ...any) {
	r.Removed = append(r.Removed, fmt.Sprintf(format, args...))
}
