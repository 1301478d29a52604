//go:build !linux

package netsetup

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// Setup wires pods with veths and Linux network namespaces: elsewhere it
// fails with an error wrapping errors.ErrUnsupported.
func Setup(_ context.Context, args SetupArgs) (*Wired, error) {
	return nil, fmt.Errorf("wire %s: not supported on %s: %w", args.HostIf, runtime.GOOS, errors.ErrUnsupported)
}

// Teardown fails with an error wrapping errors.ErrUnsupported off Linux.
func Teardown(hostIf string) error {
	return fmt.Errorf("tear down %s: not supported on %s: %w", hostIf, runtime.GOOS, errors.ErrUnsupported)
}

// Check fails with an error wrapping errors.ErrUnsupported off Linux.
func Check(_ context.Context, args CheckArgs) error {
	return fmt.Errorf("check %s: not supported on %s: %w", args.HostIf, runtime.GOOS, errors.ErrUnsupported)
}

// ListHostLinks fails with an error wrapping errors.ErrUnsupported off
// Linux.
func ListHostLinks() ([]string, error) {
	return nil, fmt.Errorf("list host links: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
