//go:build unix

package api

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// writeRequest writes line to conn, with file's descriptor attached to it
// as SCM_RIGHTS ancillary data when file is not nil. The kernel gives the
// agent its own descriptor for the same open file: closing ours after the
// write changes nothing for the agent.
func writeRequest(conn net.Conn, line []byte, file *os.File) error {
	if file == nil {
		_, err := conn.Write(line)
		return err
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("pass %s: the connection is not a unix socket", file.Name())
	}
	raw, err := file.SyscallConn()
	if err != nil {
		return fmt.Errorf("pass %s: %w", file.Name(), err)
	}
	var n int
	var werr error
	err = raw.Control(func(fd uintptr) {
		n, _, werr = uc.WriteMsgUnix(line, syscall.UnixRights(int(fd)), nil)
	})
	if err == nil {
		err = werr
	}
	if err == nil && n < len(line) {
		// The descriptor went with the first bytes; the rest follow
		// as plain data.
		_, err = conn.Write(line[n:])
	}
	return err
}
