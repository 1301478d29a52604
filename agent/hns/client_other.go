//go:build !windows

package hns

import (
	"errors"
	"fmt"
	"runtime"
)

// NewClient returns the Client of the HNS network named network. HNS
// exists only on Windows: elsewhere NewClient returns an error wrapping
// errors.ErrUnsupported; tests use Memory.
func NewClient(network string) (Client, error) {
	return nil, fmt.Errorf("open hns network %s: not supported on %s: %w", network, runtime.GOOS, errors.ErrUnsupported)
}
