package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version, Commit and Date are set at link time (see the package
// documentation); empty means "read it from the toolchain's stamp".
var (
	// Version is the release, such as v0.1.0, or git describe's answer.
	Version string
	// Commit is the full commit hash, with "-dirty" when the tree had
	// uncommitted changes.
	Commit string
	// Date is the commit's time in RFC 3339, UTC: a build of the same
	// tree gives the same answer, whenever it is made.
	Date string
)

// Unknown is what Info holds for a value neither the linker nor the
// toolchain's stamp gave.
const Unknown = "unknown"

// Info describes one build. Its field names are those of `lockstep version
// -o json` and -o yaml.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	info, _ := debug.ReadBuildInfo()
	return fromBuild(info, Version, Commit, Date)
}

// fromBuild merges the toolchain's stamp (info may be nil) with the
// linker's values, which win when set.
func fromBuild(info *debug.BuildInfo, version, commit, date string) Info {
	out := Info{Version: "dev", Commit: Unknown, Date: Unknown, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info != nil {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			out.Version = v // go install lockstep.dev/lockstep/cmd/lockstep@v0.1.0
		}
		var dirty bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				out.Commit = s.Value
			case "vcs.time":
				out.Date = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && out.Commit != Unknown {
			out.Commit += "-dirty"
		}
		if info.GoVersion != "" {
			out.GoVersion = info.GoVersion
		}
	}
	for _, v := range []struct {
		dst *string
		src string
	}{{&out.Version, version}, {&out.Commit, commit}, {&out.Date, date}} {
		if v.src != "" {
			*v.dst = v.src
		}
	}
	return out
}

// ShortCommit is the commit cut to 12 hex digits, "-dirty" kept.
func (i Info) ShortCommit() string {
	hash, dirty := i.Commit, ""
	if len(hash) > 6 && hash[len(hash)-6:] == "-dirty" {
		hash, dirty = hash[:len(hash)-6], "-dirty"
	}
	if len(hash) > 12 {
		hash = hash[:12]
	}
	return hash + dirty
}

// String returns "lockstep VERSION (commit COMMIT, DATE, GOVERSION PLATFORM)".
func (i Info) String() string {
	return fmt.Sprintf("lockstep %s (commit %s, %s, %s %s)", i.Version, i.ShortCommit(), i.Date, i.GoVersion, i.Platform)
}

// String returns Get().String().
func String() string { return Get().String() }
