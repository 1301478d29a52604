//go:build !linux

package uninstall

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// Run is for Linux nodes: the agent programs nothing this package knows
// how to remove on other systems.
func Run(context.Context, Options) (*Report, error) {
	return nil, fmt.Errorf("uninstall: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// CheckNoAgent has no agent to look for on this system.
func CheckNoAgent(string) error { return nil }
