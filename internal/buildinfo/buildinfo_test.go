package buildinfo

import (
	"runtime/debug"
	"testing"
)

// TestFromBuild shows where each value comes from: the linker's -X values
// win, the toolchain's stamp fills in the rest, and what neither gives is
// "unknown" (or "dev" for the version).
func TestFromBuild(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamp := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: modified},
		}}
	}
	tests := []struct {
		name                  string
		info                  *debug.BuildInfo
		version, commit, date string // the linker's
		want                  Info
		wantShort             string
	}{
		{
			name: "no stamp, no linker values",
			want: Info{Version: "dev", Commit: Unknown, Date: Unknown}, wantShort: Unknown,
		},
		{
			name: "a clean checkout", info: stamp("false"),
			want: Info{Version: "dev", Commit: rev, Date: "2026-01-02T03:04:05Z", GoVersion: "go1.99"}, wantShort: "0123456789ab",
		},
		{
			name: "a modified checkout", info: stamp("true"),
			want: Info{Version: "dev", Commit: rev + "-dirty", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.99"}, wantShort: "0123456789ab-dirty",
		},
		{
			name: "the linker's values win", info: stamp("true"), version: "v1.2.3", commit: "fedcba9876543210", date: "2030-01-01T00:00:00Z",
			want: Info{Version: "v1.2.3", Commit: "fedcba9876543210", Date: "2030-01-01T00:00:00Z", GoVersion: "go1.99"}, wantShort: "fedcba987654",
		},
		{
			name: "go install of a release", info: &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}},
			want: Info{Version: "v0.4.0", Commit: Unknown, Date: Unknown}, wantShort: Unknown,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromBuild(tt.info, tt.version, tt.commit, tt.date)
			if tt.want.GoVersion == "" {
				tt.want.GoVersion = got.GoVersion // the running toolchain's
			}
			tt.want.Platform = got.Platform
			if got != tt.want {
				t.Errorf("fromBuild = %+v, want %+v", got, tt.want)
			}
			if s := got.ShortCommit(); s != tt.wantShort {
				t.Errorf("ShortCommit = %q, want %q", s, tt.wantShort)
			}
			if got.Platform == "" || got.GoVersion == "" {
				t.Errorf("fromBuild = %+v: no platform or Go version", got)
			}
		})
	}
}
