//go:build !unix

package server

import (
	"net"
	"os"
)

// rightsReader reads a connection. Off Unix no descriptors can be passed,
// so there are never any to take.
type rightsReader struct{ net.Conn }

func newRightsReader(conn net.Conn) *rightsReader { return &rightsReader{conn} }

func (r *rightsReader) take(bool) ([]*os.File, error) { return nil, nil }

func (r *rightsReader) discard() {}
