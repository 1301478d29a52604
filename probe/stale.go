//go:build linux

package probe

import (
	"errors"

	"lockstep.dev/lockstep/probe/nodesim"
)

// NSPrefix names every namespace and work directory a probe run creates
// (PREFIX-PID-N), so SweepStale can tell a dead run's leftovers from a live
// one's.
const NSPrefix = "lsprobe"

// SweepStale removes what probe runs killed outright (SIGKILL, a crash)
// left behind: their namespaces, any process still running from their work
// directory, their bpffs mount and the directory itself. Runs whose process
// is alive are left alone. It returns how many namespaces and directories
// it removed.
func SweepStale() (int, error) {
	namespaces, err := nodesim.SweepStale(NSPrefix)
	dirs, derr := nodesim.SweepStaleRuns(NSPrefix, "")
	return namespaces + dirs, errors.Join(err, derr)
}
