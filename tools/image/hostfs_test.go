//go:build linux

package main

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/internal/ociimage"
)

// TestHostFSKeepsSymlinkChains: a library reached through a merged-/usr
// directory link and a soname link arrives with both links and the file,
// at the host's paths.
func TestHostFSKeepsSymlinkChains(t *testing.T) {
	root := t.TempDir()
	mustMkdir(t, filepath.Join(root, "usr/lib"))
	mustSymlink(t, "usr/lib", filepath.Join(root, "lib"))
	if err := os.WriteFile(filepath.Join(root, "usr/lib/libfoo.so.1.2"), []byte("elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "libfoo.so.1.2", filepath.Join(root, "usr/lib/libfoo.so.1"))

	h := newHostFS()
	real, err := h.Add(filepath.Join(root, "lib/libfoo.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "usr/lib/libfoo.so.1.2"); real != want {
		t.Errorf("Add returned %s, want %s", real, want)
	}
	got := map[string]ociimage.Entry{}
	for _, e := range h.Entries() {
		if rel, ok := strings.CutPrefix(e.Path, root+"/"); ok {
			got[rel] = e
		}
	}
	if e := got["lib"]; !e.IsSymlink() || e.Target != "usr/lib" {
		t.Errorf("lib = %+v, want a symlink to usr/lib", e)
	}
	if e := got["usr/lib/libfoo.so.1"]; !e.IsSymlink() || e.Target != "libfoo.so.1.2" {
		t.Errorf("usr/lib/libfoo.so.1 = %+v, want a symlink to libfoo.so.1.2", e)
	}
	if e := got["usr/lib/libfoo.so.1.2"]; !e.Mode.IsRegular() || e.Mode.Perm() != 0o644 || e.Source != real {
		t.Errorf("usr/lib/libfoo.so.1.2 = %+v, want the file copied with mode 0644", e)
	}
	if e := got["usr/lib"]; !e.IsDir() {
		t.Errorf("usr/lib = %+v, want a directory", e)
	}
	if !slices.Equal(h.Copied(), []string{real}) {
		t.Errorf("Copied() = %v, want only %s", h.Copied(), real)
	}
}

func TestHostFSRejects(t *testing.T) {
	root := t.TempDir()
	mustSymlink(t, "b", filepath.Join(root, "a"))
	mustSymlink(t, "a", filepath.Join(root, "b"))

	h := newHostFS()
	if _, err := h.Add(filepath.Join(root, "a")); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("a symlink loop: Add = %v", err)
	}
	if _, err := h.Add(filepath.Join(root, "missing")); !errors.Is(err, errNotFound) {
		t.Errorf("a missing file: Add = %v, want errNotFound", err)
	}
	if err := h.Put(ociimage.Dir("/run", 0o755)); err != nil {
		t.Fatal(err)
	}
	if err := h.Put(ociimage.Dir("/run", 0o755)); err != nil {
		t.Errorf("the same entry twice: %v", err)
	}
	if err := h.Put(ociimage.Dir("/run", 0o700)); err == nil {
		t.Error("two different entries at /run: no error")
	}
}

// TestAddELFFindsLibrariesAndLoader resolves a dynamically linked program
// of this machine: it needs libc and the loader named in its header.
func TestAddELFFindsLibrariesAndLoader(t *testing.T) {
	const prog = "/usr/bin/true"
	interp := interpreterOf(t, prog)
	dirs, err := libDirs(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	h := newHostFS()
	if err := h.AddELF(prog, dirs); err != nil {
		t.Fatal(err)
	}
	realInterp, err := filepath.EvalSymlinks(interp)
	if err != nil {
		t.Fatal(err)
	}
	copied := h.Copied()
	if !slices.Contains(copied, realInterp) {
		t.Errorf("the loader %s (%s) was not copied: %v", interp, realInterp, copied)
	}
	if !slices.ContainsFunc(copied, func(p string) bool { return filepath.Base(p) == "libc.so.6" }) {
		t.Errorf("libc.so.6 was not copied: %v", copied)
	}
	// The paths the program names must resolve in the image as on the host.
	for _, p := range []string{interp, "/lib/" + multiarch[runtime.GOARCH] + "/libc.so.6"} {
		if e, ok := resolveIn(h.entries, p); !ok || !e.Mode.IsRegular() {
			t.Errorf("%s does not lead to a file in the image (got %+v)", p, e)
		}
	}

	versions, err := packageVersions(copied)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(versions, func(v string) bool { return strings.HasPrefix(v, "libc6=") }) ||
		!slices.ContainsFunc(versions, func(v string) bool { return strings.HasPrefix(v, "coreutils=") }) {
		t.Errorf("packageVersions = %v, want libc6 and coreutils", versions)
	}

	if _, err := staticELF(prog); err == nil {
		t.Errorf("staticELF(%s) accepted a dynamically linked program", prog)
	}
}

func interpreterOf(t *testing.T, p string) string {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	t.Fatalf("%s has no interpreter; this test needs a dynamically linked program", p)
	return ""
}

// resolveIn follows p through the symlinks among entries, as the kernel
// would inside the image, and returns the entry it ends at.
func resolveIn(entries map[string]ociimage.Entry, p string) (ociimage.Entry, bool) {
	for hops := 0; hops < maxLinks; hops++ {
		cur, restarted := "/", false
		parts := strings.Split(strings.Trim(p, "/"), "/")
		for i, part := range parts {
			cur = filepath.Join(cur, part)
			e, ok := entries[cur]
			if !ok {
				return ociimage.Entry{}, false
			}
			if e.IsSymlink() {
				target := e.Target
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(cur), target)
				}
				p = filepath.Join(append([]string{target}, parts[i+1:]...)...)
				restarted = true
				break
			}
			if i == len(parts)-1 {
				return e, true
			}
		}
		if !restarted {
			return ociimage.Entry{}, false
		}
	}
	return ociimage.Entry{}, false
}

func TestMergedUsrTwin(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib64/ld-linux-x86-64.so.2", "/usr/lib64/ld-linux-x86-64.so.2"},
		{"/usr/sbin/ipset", "/sbin/ipset"},
		{"/bin/true", "/usr/bin/true"},
		{"/etc/protocols", ""},
		{"/usr/local/bin/x", ""},
		{"/library/x", ""},
	}
	for _, tt := range tests {
		got, ok := mergedUsrTwin(tt.in)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("mergedUsrTwin(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
