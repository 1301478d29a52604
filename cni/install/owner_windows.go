package install

import "os"

// fileOwner reports no owner: Windows protects files with ACLs, which
// Install leaves to the node's image.
func fileOwner(os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }

// ownersApply reports whether Unix owners and modes protect files here.
func ownersApply() bool { return false }
