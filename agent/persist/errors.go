package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// The errors Open, the Load functions and Commit return wrap one of these,
// so a caller can tell the cases apart with errors.Is. Each case needs a
// different answer from the operator, and the messages say which; only
// ErrCorrupt and ErrTruncated suggest moving the file aside, because only
// there is nothing left to save.
var (
	// ErrEmptyStateFile marks a state file of zero bytes. lockstep never
	// writes one (a new file is built aside and linked into place), so
	// the allocations it should hold are lost: starting empty would hand
	// the addresses of running pods to new ones.
	ErrEmptyStateFile = errors.New("state file is empty (0 bytes)")

	// ErrTruncated marks a bbolt file shorter than its last commit says:
	// pages that hold allocations are missing.
	ErrTruncated = errors.New("state file is truncated")

	// ErrCorrupt marks a state file that cannot be read: not a bbolt file,
	// damaged pages, or a record that does not decode.
	ErrCorrupt = errors.New("state file unreadable")

	// ErrForeignStateFile marks a readable bbolt file that is not a
	// lockstep agent's: it is refused and left as it is.
	ErrForeignStateFile = errors.New("not a lockstep state file")

	// ErrSchemaVersion marks a lockstep state file of another schema
	// version, written by another lockstep release.
	ErrSchemaVersion = errors.New("state file schema version not supported")

	// ErrReadOnly marks a state file, or a state directory, the agent may
	// not write: a read-only file system (EROFS) or permissions (EACCES,
	// EPERM). The file itself is fine.
	ErrReadOnly = errors.New("state file not writable")

	// ErrLocked marks a state file another process holds open for writing.
	ErrLocked = errors.New("state file locked by another process")

	// ErrCommitFailed marks a write to the state file that bbolt could not
	// commit. What is on disk may then be ahead of what the agent served
	// (bbolt may have written its meta page before the fsync failed), so
	// the DB takes no further writes: see DB.Failed.
	ErrCommitFailed = errors.New("state file commit failed")
)

// notWritable reports whether err means the file system or permissions
// refuse a write, as opposed to the file being damaged.
func notWritable(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)
}

// keepsFile is the reassurance each refusal ends with.
const keepsFile = "the agent will not start on it and has not changed it"

func emptyFile(path string) error {
	return fmt.Errorf("open state file %s: %w; %s: the allocations it should hold are lost, and starting empty "+
		"would hand the addresses of running pods to new ones: drain the node (or delete its pods), then remove the file",
		path, ErrEmptyStateFile, keepsFile)
}

func truncated(path string, size, want int64) error {
	return fmt.Errorf("read state file %s: %w: %d bytes, its last commit needs %d; %s: restore it from a backup if there is one, "+
		"otherwise drain the node and move it aside to start with no allocations (pods on this node then need re-creating)",
		path, ErrTruncated, size, want, keepsFile)
}

func corrupt(path string, err error) error {
	return fmt.Errorf("read state file %s: %w: %w; %s: "+
		"keep it for inspection, move it aside to start with no allocations (pods on this node then need re-creating)",
		path, ErrCorrupt, err, keepsFile)
}

func foreign(path, why string) error {
	return fmt.Errorf("open state file %s: %w: %s; %s: point --state-dir at the agent's own directory, "+
		"or move the file away if it belongs to another program",
		path, ErrForeignStateFile, why, keepsFile)
}

// readOnly is the error for a state file, or a directory for a new one,
// the agent may not write; exists says whether the file is there.
func readOnly(path string, err error, exists bool) error {
	if !exists {
		return fmt.Errorf("create state file %s: %w: %w; the agent will not start without one: "+
			"make its file system writable (or fix the state directory's permissions) and restart the agent",
			path, ErrReadOnly, err)
	}
	return fmt.Errorf("open state file %s: %w: %w; %s: make its file system writable (or fix its permissions) and restart the agent; "+
		"do not move the file aside, it holds this node's allocations",
		path, ErrReadOnly, err, keepsFile)
}

// commitFailed is the error of a failed commit, and of every write after
// it.
func commitFailed(path string, err error) error {
	hint := "restart the agent: it reloads the file, which is the truth"
	switch {
	case notWritable(err):
		return fmt.Errorf("commit to state file %s: %w: %w: %w; the agent takes no more writes: "+
			"make its file system writable and restart the agent; do not move the file aside, it holds this node's allocations",
			path, ErrCommitFailed, ErrReadOnly, err)
	case errors.Is(err, syscall.ENOSPC):
		hint = "free space on its file system, then " + hint
	}
	return fmt.Errorf("commit to state file %s: %w: %w; the agent takes no more writes, "+
		"because the file may hold a change it did not make visible: %s",
		path, ErrCommitFailed, err, hint)
}
