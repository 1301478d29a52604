package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"lockstep.dev/lockstep/internal/buildinfo"
)

// TestVersionFromMake builds the binary the way `make build` does for a
// tree without .git, with the version, commit and date given on make's
// command line, and checks that every output format reports them.
func TestVersionFromMake(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := t.TempDir()
	want := buildinfo.Info{
		Version:   "v9.8.7-test",
		Commit:    "0123456789abcdef0123456789abcdef01234567-dirty",
		Date:      "2031-02-03T04:05:06Z",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	mk := exec.Command("make", "build", "BIN="+bin, "VERSION="+want.Version, "COMMIT="+want.Commit, "DATE="+want.Date)
	mk.Dir = "../.."
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	lockstep := filepath.Join(bin, "lockstep")

	out, err := runOutput(lockstep, "version")
	if line := "lockstep v9.8.7-test (commit 0123456789ab-dirty, 2031-02-03T04:05:06Z, " + want.GoVersion + " " + want.Platform + ")\n"; err != nil || out != line {
		t.Errorf("lockstep version: %v, %q; want %q", err, out, line)
	}
	for _, format := range []string{"json", "yaml"} {
		out, err := runOutput(lockstep, "version", "-o", format)
		if err != nil {
			t.Fatalf("lockstep version -o %s: %v\n%s", format, err, out)
		}
		var got buildinfo.Info
		if err := yaml.Unmarshal([]byte(out), &got); err != nil { // YAML is a superset of JSON
			t.Fatalf("lockstep version -o %s: %v\n%s", format, err, out)
		}
		if got != want {
			t.Errorf("lockstep version -o %s = %+v, want %+v", format, got, want)
		}
	}
	// The plugin reports the same build.
	cni := exec.Command(filepath.Join(bin, "lockstep-cni"))
	cni.Env = append(os.Environ(), "CNI_COMMAND=")
	b, _ := cni.CombinedOutput()
	if !strings.Contains(string(b), "lockstep-cni v9.8.7-test (commit 0123456789ab-dirty") {
		t.Errorf("lockstep-cni without a command printed %q, want its version and commit", b)
	}
}

// TestVersionFallback builds the binary without the linker's values: the
// version is "dev", and the commit and date are what the toolchain
// stamped, as `go version -m` reads them from the same binary ("unknown"
// when it stamped none: outside a git checkout, in a git worktree, or
// with -buildvcs=false).
func TestVersionFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	lockstep := filepath.Join(t.TempDir(), "lockstep")
	build := exec.Command("go", "build", "-o", lockstep, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	modinfo, err := exec.Command("go", "version", "-m", lockstep).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := buildinfo.Info{Version: "dev", Commit: buildinfo.Unknown, Date: buildinfo.Unknown}
	dirty := false
	for _, line := range strings.Split(string(modinfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "build" {
			continue
		}
		key, value, _ := strings.Cut(f[1], "=")
		switch key {
		case "vcs.revision":
			want.Commit = value
		case "vcs.time":
			want.Date = value
		case "vcs.modified":
			dirty = value == "true"
		}
	}
	if dirty {
		want.Commit += "-dirty"
	}
	out, err := runOutput(lockstep, "version", "-o", "json")
	if err != nil {
		t.Fatalf("lockstep version -o json: %v\n%s", err, out)
	}
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("lockstep version -o json: %v\n%s", err, out)
	}
	if got.Version != want.Version || got.Commit != want.Commit || got.Date != want.Date {
		t.Errorf("lockstep version -o json = %+v, want version %q, commit %q and date %q (go version -m says:\n%s)", got, want.Version, want.Commit, want.Date, modinfo)
	}
	t.Logf("the toolchain stamped commit %q, date %q", want.Commit, want.Date)
}
