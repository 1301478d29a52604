//go:build !unix

package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
)

// writeRequest writes line to conn. Descriptors cannot be passed over a
// unix socket off Unix: a request that would carry one fails with an
// error wrapping errors.ErrUnsupported.
func writeRequest(conn net.Conn, line []byte, file *os.File) error {
	if file != nil {
		return fmt.Errorf("pass %s: not supported on %s: %w", file.Name(), runtime.GOOS, errors.ErrUnsupported)
	}
	_, err := conn.Write(line)
	return err
}
