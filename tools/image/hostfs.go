//go:build linux

package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"lockstep.dev/lockstep/internal/ociimage"
)

// errNotFound is returned when a file the image needs is not on the build
// machine; the message says which package to install.
var errNotFound = errors.New("not found on this machine")

// maxLinks bounds the symlinks followed for one path, as the kernel does.
const maxLinks = 40

// hostFS collects files of the build machine for an image, at the same
// paths and through the same symlinks as on the host: a library reached as
// /lib/x86_64-linux-gnu/libmnl.so.0 on a merged-/usr Debian gives the image
// the symlinks lib -> usr/lib and libmnl.so.0 -> libmnl.so.0.2.0 and the
// file itself, so the dynamic loader in the image finds what it found on
// the host.
type hostFS struct {
	entries map[string]ociimage.Entry
	// copied are the host paths of the regular files Add copied, for
	// dpkg; entries made with Put are not host files of a package.
	copied []string
}

func newHostFS() *hostFS { return &hostFS{entries: map[string]ociimage.Entry{}} }

// Entries returns what was collected, sorted by path.
func (h *hostFS) Entries() []ociimage.Entry {
	out := make([]ociimage.Entry, 0, len(h.entries))
	for _, e := range h.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Copied returns the host paths of the regular files Add collected, sorted.
func (h *hostFS) Copied() []string {
	out := append([]string(nil), h.copied...)
	sort.Strings(out)
	return out
}

// Put adds an entry that is not a copy of a host file (a generated
// /etc/nsswitch.conf, /tmp). Adding the same entry twice is harmless;
// two different entries at one path are an error.
func (h *hostFS) Put(e ociimage.Entry) error {
	if old, ok := h.entries[e.Path]; ok {
		if old.Mode != e.Mode || old.Target != e.Target || old.Source != e.Source || !bytes.Equal(old.Data, e.Data) {
			return fmt.Errorf("add %s to the image: already there as something else", e.Path)
		}
		return nil
	}
	h.entries[e.Path] = e
	return nil
}

// Add copies the host path p into the image with every symlink met on the
// way to the file it names, and returns that file's real path.
func (h *hostFS) Add(p string) (string, error) {
	return h.resolve(p, 0)
}

func (h *hostFS) resolve(p string, links int) (string, error) {
	if links > maxLinks {
		return "", fmt.Errorf("resolve %s: too many levels of symbolic links", p)
	}
	p = filepath.Clean(p)
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("resolve %s: not an absolute path", p)
	}
	if p == "/" {
		return p, nil
	}
	dir, err := h.resolve(filepath.Dir(p), links)
	if err != nil {
		return "", err
	}
	real := filepath.Join(dir, filepath.Base(p))
	fi, err := os.Lstat(real)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("copy %s: %w", p, errNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", p, err)
	}
	perm := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(real)
		if err != nil {
			return "", fmt.Errorf("copy %s: %w", p, err)
		}
		if err := h.Put(ociimage.Symlink(real, target)); err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		return h.resolve(target, links+1)
	case fi.IsDir():
		return real, h.Put(ociimage.Dir(real, perm))
	case fi.Mode().IsRegular():
		if _, ok := h.entries[real]; !ok {
			h.copied = append(h.copied, real)
		}
		return real, h.Put(ociimage.File(real, real, perm))
	}
	return "", fmt.Errorf("copy %s: %v is not a file, directory or symlink", p, fi.Mode().Type())
}

// AddELF copies the executable or shared object p, its program interpreter
// and, recursively, every library it needs (DT_NEEDED), found in libDirs in
// order as the dynamic loader searches them. Libraries of another machine
// or class (a 32-bit libc in /usr/lib) are passed over, as ld.so does.
// DT_RPATH and DT_RUNPATH are not read: Debian's packages do not set them.
func (h *hostFS) AddELF(p string, libDirs []string) error {
	queue := []string{p}
	seen := map[string]bool{}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		real, err := h.Add(next)
		if err != nil {
			return err
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		needs, err := elfNeeds(real, libDirs)
		if err != nil {
			return err
		}
		queue = append(queue, needs...)
	}
	return nil
}

// elfNeeds returns the interpreter and the paths of the libraries the ELF
// file at p needs.
func elfNeeds(p string, libDirs []string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", p, err)
	}
	defer f.Close()
	var needs []string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("read the interpreter of %s: %w", p, err)
		}
		needs = append(needs, string(bytes.TrimRight(b, "\x00")))
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read the libraries %s needs: %w", p, err)
	}
	for _, lib := range libs {
		found, err := findLibrary(lib, f.Machine, f.Class, libDirs)
		if err != nil {
			return nil, fmt.Errorf("find %s, needed by %s: %w", lib, p, err)
		}
		needs = append(needs, found)
	}
	return needs, nil
}

// findLibrary returns the first lib in libDirs built for machine and class.
func findLibrary(lib string, machine elf.Machine, class elf.Class, libDirs []string) (string, error) {
	for _, dir := range libDirs {
		p := filepath.Join(dir, lib)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		ok := f.Machine == machine && f.Class == class
		f.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w in %v", errNotFound, libDirs)
}

// staticELF checks that p is a statically linked ELF executable, which
// needs nothing else from the image, and returns its architecture as
// GOARCH spells it.
func staticELF(p string) (string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("read ELF %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked; the image holds nothing else, so build it static (CGO_ENABLED=0)", p)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return "", fmt.Errorf("%s needs shared libraries %v; build it static (CGO_ENABLED=0)", p, libs)
	}
	arch, ok := goarch(f)
	if !ok {
		return "", fmt.Errorf("%s is for machine %v, which this tool cannot name", p, f.Machine)
	}
	return arch, nil
}

// goarch names an ELF file's architecture as Go and image configs do.
func goarch(f *elf.File) (string, bool) {
	little := f.Data == elf.ELFDATA2LSB
	switch {
	case f.Machine == elf.EM_X86_64:
		return "amd64", true
	case f.Machine == elf.EM_AARCH64:
		return "arm64", true
	case f.Machine == elf.EM_386:
		return "386", true
	case f.Machine == elf.EM_ARM:
		return "arm", true
	case f.Machine == elf.EM_RISCV && f.Class == elf.ELFCLASS64:
		return "riscv64", true
	case f.Machine == elf.EM_PPC64 && little:
		return "ppc64le", true
	case f.Machine == elf.EM_S390:
		return "s390x", true
	}
	return "", false
}
