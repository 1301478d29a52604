//go:build linux

package kubee2e

import (
	"fmt"
	"syscall"
)

// CheckSCTP returns nil when this kernel speaks SCTP (a socket(AF_INET,
// SOCK_STREAM, IPPROTO_SCTP) opens), else why not. The nodes of the
// real-node cluster share the machine's kernel, so its answer is theirs.
func CheckSCTP() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err != nil {
		return fmt.Errorf("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): %w", err)
	}
	syscall.Close(fd)
	return nil
}
