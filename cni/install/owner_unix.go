//go:build !windows

package install

import (
	"os"
	"syscall"
)

// fileOwner returns the owner of the file st describes.
func fileOwner(st os.FileInfo) (uid, gid int, ok bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(sys.Uid), int(sys.Gid), true
}

// ownersApply reports whether Unix owners and modes protect files here.
func ownersApply() bool { return true }
