//go:build linux

package nodesim

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// ServeTCP listens on addr (host:port, either family) inside n and answers
// every connection with "ok" before closing it, until the returned
// listener is closed. Connects is its client.
func ServeTCP(n ns.NetNS, addr string) (net.Listener, error) {
	var l net.Listener
	if err := n.Do(func(ns.NetNS) (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	return l, nil
}

// Connects reports whether a TCP connection from inside n to addr, served
// by ServeTCP, completes and reads the server's "ok" within timeout for
// each step: both directions of the connection passed.
func Connects(n ns.NetNS, addr string, timeout time.Duration) bool {
	ok := false
	_ = n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 2)
		_, err = io.ReadFull(c, buf)
		ok = err == nil && string(buf) == "ok"
		return nil
	})
	return ok
}
