// Package buildinfo reports which lockstep build is running. It imports only
// the standard library: the CNI plugin prints it on VERSION.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time (-ldflags "-X lockstep.dev/lockstep/internal/buildinfo.Version=v0.1.0").
var Version = "dev"

// String returns "lockstep VERSION (commit COMMIT, GOVERSION)".
func String() string {
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				commit = s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("lockstep %s (commit %s, %s)", Version, commit, runtime.Version())
}
