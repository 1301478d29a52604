//go:build linux

package nodesim

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MountBPF mounts a private bpffs instance on dir (created if missing), so
// an agent under test pins its maps there instead of the machine's
// /sys/fs/bpf.
func MountBPF(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create bpffs mount point: %w", err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	return nil
}

// UnmountBPF unmounts a bpffs mounted by MountBPF; maps pinned only there
// are freed once no program or process holds them. A dir that is not
// mounted is not an error.
func UnmountBPF(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount bpffs %s: %w", dir, err)
	}
	return nil
}
