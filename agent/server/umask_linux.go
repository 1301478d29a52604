package server

import (
	"net"
	"sync"
	"syscall"
)

var umaskMu sync.Mutex

// listenUnixPrivate binds the socket under umask 077, so it is never
// reachable by others, not even between bind and chmod.
func listenUnixPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
