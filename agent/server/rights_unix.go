//go:build unix

package server

import (
	"net"
	"os"
	"syscall"

	"lockstep.dev/lockstep/agent/api"
)

// rightsReader reads a connection with recvmsg, keeping the descriptors
// that arrive with its bytes (SCM_RIGHTS) until take hands them out. A
// plain read would make the kernel drop them; reading them is how the
// server can close every one it was sent.
type rightsReader struct {
	conn  *net.UnixConn // nil: not a unix socket, nothing to receive
	plain net.Conn
	oob   []byte
	fds   []int
	// truncated: a control message did not fit oob, so the kernel
	// dropped (and closed) some descriptors.
	truncated bool
}

// oobFDs is how many descriptors one read has room for: more than
// api.MaxFDs, so a request with too many is seen and refused rather than
// cut short.
const oobFDs = 8

func newRightsReader(conn net.Conn) *rightsReader {
	uc, _ := conn.(*net.UnixConn)
	return &rightsReader{conn: uc, plain: conn, oob: make([]byte, syscall.CmsgSpace(oobFDs*4))}
}

// Read implements io.Reader.
func (r *rightsReader) Read(p []byte) (int, error) {
	if r.conn == nil {
		return r.plain.Read(p)
	}
	n, oobn, flags, _, err := r.conn.ReadMsgUnix(p, r.oob)
	if n < 0 {
		n = 0 // a failed read reports -1
	}
	if flags&syscall.MSG_CTRUNC != 0 {
		r.truncated = true
	}
	if oobn > 0 {
		r.collect(r.oob[:oobn])
	}
	return n, err
}

// collect keeps the descriptors of every SCM_RIGHTS message in oob.
func (r *rightsReader) collect(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		r.truncated = true
		return
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue // not SCM_RIGHTS
		}
		r.fds = append(r.fds, fds...)
	}
}

// take hands out the descriptors received since the last take, as files
// the caller must close. With pipelined (bytes of another request were
// read with this one), too many descriptors, or some lost to truncation,
// it closes them all and returns the error that refuses the request.
func (r *rightsReader) take(pipelined bool) ([]*os.File, error) {
	fds, truncated := r.fds, r.truncated
	r.fds, r.truncated = nil, false
	var err error
	switch {
	case truncated:
		err = api.Errorf(api.CodeInvalidNetNS, "lockstep agent: the request passed more than %d descriptors", oobFDs)
	case len(fds) > api.MaxFDs:
		err = api.Errorf(api.CodeInvalidNetNS, "lockstep agent: the request passed %d descriptors, at most %d is allowed", len(fds), api.MaxFDs)
	case len(fds) > 0 && pipelined:
		err = api.Errorf(api.CodeInvalidNetNS, "lockstep agent: a request that passes a descriptor must be the only one in flight on its connection")
	}
	if err != nil {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, err
	}
	files := make([]*os.File, 0, len(fds))
	for _, fd := range fds {
		files = append(files, os.NewFile(uintptr(fd), "pod netns"))
	}
	return files, nil
}

// discard closes descriptors no request took.
func (r *rightsReader) discard() {
	for _, fd := range r.fds {
		syscall.Close(fd)
	}
	r.fds = nil
}
