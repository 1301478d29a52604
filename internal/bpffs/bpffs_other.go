//go:build !linux

package bpffs

import (
	"errors"
	"fmt"
	"runtime"
)

// errUnsupported says bpffs is Linux's.
func errUnsupported(what string) error {
	return fmt.Errorf("%s: bpffs is a linux file system, not %s's: %w", what, runtime.GOOS, errors.ErrUnsupported)
}

// On fails with an error wrapping errors.ErrUnsupported.
func On(string) (bool, error) { return false, errUnsupported("stat bpffs") }

// Mount fails with an error wrapping errors.ErrUnsupported.
func Mount(string) (bool, error) { return false, errUnsupported("mount bpffs") }

// EnsureRoot fails with an error wrapping errors.ErrUnsupported.
func EnsureRoot(string) (string, error) { return "", errUnsupported("mount bpffs") }

// MountInNamespace fails with an error wrapping errors.ErrUnsupported.
func MountInNamespace(string, string) (bool, error) { return false, errUnsupported("mount bpffs") }
