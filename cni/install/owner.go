package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrUnsafeDir is wrapped by Install's error when the bin or conf
// directory, or a directory above it, could be written by someone other
// than root: whoever can write there can replace the plugin the runtime
// executes as root for every pod, or its config.
var ErrUnsafeDir = errors.New("unsafe directory")

// owner is who must own what Install writes and the directories it
// writes in. The zero value is root:root; tests that cannot run as root
// name their own user.
type owner struct{ uid, gid int }

// checkDir refuses dir unless it, and every directory above it, is owned
// by root (or o) and writable by its owner only. Above dir, a sticky
// directory such as /tmp may be world-writable: nobody else can rename or
// remove what is in it.
func checkDir(dir string, o owner) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("check %s: %w", dir, err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("check %s: %w", d, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("check %s: %s is not a directory", dir, d)
		}
		if uid, _, ok := fileOwner(st); ok && uid != 0 && uid != o.uid {
			return fmt.Errorf("check %s: %w: %s is owned by uid %d, not root: its owner could replace what the container runtime runs as root; chown root:root %s",
				dir, ErrUnsafeDir, d, uid, d)
		}
		sticky := d != abs && st.Mode()&os.ModeSticky != 0
		if st.Mode().Perm()&0o022 != 0 && !sticky && ownersApply() {
			return fmt.Errorf("check %s: %w: %s is group- or world-writable (%s): anyone who may write it could replace what the container runtime runs as root; chmod go-w %s",
				dir, ErrUnsafeDir, d, st.Mode().Perm(), d)
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

// fixOwnerMode gives the file open as f, described by st, owner o and
// mode, and reports whether it had to.
func fixOwnerMode(f *os.File, st os.FileInfo, o owner, mode os.FileMode) (bool, error) {
	if !ownersApply() {
		return false, nil
	}
	changed := false
	if uid, gid, ok := fileOwner(st); ok && (uid != o.uid || gid != o.gid) {
		if err := f.Chown(o.uid, o.gid); err != nil {
			return false, fmt.Errorf("chown %s to %d:%d: %w", f.Name(), o.uid, o.gid, err)
		}
		changed = true
	}
	if st.Mode().Perm() != mode || st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		if err := f.Chmod(mode); err != nil {
			return false, fmt.Errorf("chmod %s to %s: %w", f.Name(), mode, err)
		}
		changed = true
	}
	return changed, nil
}

// fixLinkOwner gives the symlink path owner o, and reports whether it had
// to.
func fixLinkOwner(path string, o owner) (bool, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return false, fmt.Errorf("check %s: %w", path, err)
	}
	uid, gid, ok := fileOwner(st)
	if !ok || uid == o.uid && gid == o.gid {
		return false, nil
	}
	if err := os.Lchown(path, o.uid, o.gid); err != nil {
		return false, fmt.Errorf("chown %s to %d:%d: %w", path, o.uid, o.gid, err)
	}
	return true, nil
}
