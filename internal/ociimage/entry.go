package ociimage

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// ErrInvalidEntry is returned for a list of entries that cannot be one file
// system: a relative or duplicate path, a file beneath a file or a symlink,
// a symlink without a target.
var ErrInvalidEntry = errors.New("invalid image entry")

// Entry is one file, directory or symlink of the image's file system.
// Build entries with [File], [Bytes], [Dir] and [Symlink].
type Entry struct {
	// Path is the absolute path in the image, e.g. /usr/local/bin/lockstep.
	Path string
	// Mode holds the type (0 for a regular file, fs.ModeDir, fs.ModeSymlink)
	// and the permissions, including fs.ModeSetuid, fs.ModeSetgid and
	// fs.ModeSticky.
	Mode fs.FileMode
	// Source is the host file a regular file's content is read from when
	// the layer is written; Data is used when Source is empty.
	Source string
	Data   []byte
	// Target is a symlink's target, relative to its directory or absolute
	// within the image.
	Target string
}

// File is a regular file copied from the host file source.
func File(path, source string, perm fs.FileMode) Entry {
	return Entry{Path: path, Mode: perm &^ fs.ModeType, Source: source}
}

// Bytes is a regular file holding data.
func Bytes(path string, data []byte, perm fs.FileMode) Entry {
	return Entry{Path: path, Mode: perm &^ fs.ModeType, Data: data}
}

// Dir is a directory, e.g. Dir("/tmp", fs.ModeSticky|0o777).
func Dir(path string, perm fs.FileMode) Entry {
	return Entry{Path: path, Mode: fs.ModeDir | perm&^fs.ModeType}
}

// Symlink is a symbolic link at path pointing to target.
func Symlink(path, target string) Entry {
	return Entry{Path: path, Mode: fs.ModeSymlink | 0o777, Target: target}
}

// IsDir reports whether e is a directory.
func (e Entry) IsDir() bool { return e.Mode&fs.ModeDir != 0 }

// IsSymlink reports whether e is a symbolic link.
func (e Entry) IsSymlink() bool { return e.Mode&fs.ModeSymlink != 0 }

// tree checks entries, adds the parent directories nobody listed (mode
// 0755), and returns everything sorted by path, each path cleaned and
// without its leading slash, as layers spell them.
func tree(entries []Entry) ([]Entry, error) {
	byPath := make(map[string]Entry, len(entries))
	for _, e := range entries {
		if !path.IsAbs(e.Path) {
			return nil, fmt.Errorf("add %q: %w: paths in the image are absolute", e.Path, ErrInvalidEntry)
		}
		p := strings.TrimPrefix(path.Clean(e.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("add %q: %w: the root is implied", e.Path, ErrInvalidEntry)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("add %q: %w: listed twice", e.Path, ErrInvalidEntry)
		}
		switch e.Mode.Type() {
		case 0, fs.ModeDir:
		case fs.ModeSymlink:
			if e.Target == "" {
				return nil, fmt.Errorf("add %q: %w: symlink without a target", e.Path, ErrInvalidEntry)
			}
		default:
			return nil, fmt.Errorf("add %q: %w: type %v is not a file, directory or symlink", e.Path, ErrInvalidEntry, e.Mode.Type())
		}
		e.Path = p
		byPath[p] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			if !ok {
				byPath[dir] = Dir(dir, 0o755)
				continue
			}
			if !parent.IsDir() {
				// A layer entry below a symlink would make the importer
				// follow it while extracting: refuse rather than guess.
				return nil, fmt.Errorf("add /%s: %w: /%s is not a directory", p, ErrInvalidEntry, dir)
			}
		}
	}
	out := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
