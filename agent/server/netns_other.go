//go:build !linux

package server

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// verifyNetns refuses every descriptor off Linux: there are no network
// namespaces to pass.
func verifyNetns(*os.File) error {
	return fmt.Errorf("network namespaces are not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
