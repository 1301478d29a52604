//go:build linux

package probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// ErrNoSCTP is reported for every SCTP probe when the kernel cannot create
// SCTP sockets (no sctp module, or it is blacklisted).
var ErrNoSCTP = errors.New("the kernel has no SCTP sockets (EPROTONOSUPPORT); load the sctp module (modprobe sctp) to probe SCTP")

// listen opens a listener for port inside the pod namespace that answers
// with name, the pod's NAMESPACE/NAME: TCP and SCTP accept, write the name
// and close; UDP sends each datagram back followed by the name. A probe
// through a Service learns from the answer which backend it reached. The
// sockets are created inside the namespace and stay in it whatever thread
// later serves them.
func listen(pod ns.NetNS, port Port, name string) (io.Closer, error) {
	var c io.Closer
	err := pod.Do(func(ns.NetNS) error {
		var err error
		addr := fmt.Sprintf(":%d", port.Port)
		switch port.Protocol {
		case TCP:
			var l net.Listener
			if l, err = net.Listen("tcp", addr); err == nil {
				go answer(l, name)
				c = l
			}
		case UDP:
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", addr); err == nil {
				go echo(pc, name)
				c = pc
			}
		case SCTP:
			var l net.Listener
			if l, err = listenSCTP(port.Port); err == nil {
				go answer(l, name)
				c = l
			}
		default:
			err = fmt.Errorf("protocol %q is not TCP, UDP or SCTP", port.Protocol)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", port, err)
	}
	return c, nil
}

// maxName bounds the answer a client reads: a pod's NAMESPACE/NAME.
const maxName = 512

func answer(l net.Listener, name string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, name)
		c.Close()
	}
}

func echo(pc net.PacketConn, name string) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(append(buf[:n:n], name...), from)
	}
}

// listenSCTP opens a one-to-one style SCTP listener on every address. Go
// has no SCTP support, so the socket is made by hand and handed to the
// runtime poller as a stream listener.
func listenSCTP(port uint16) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, sctpError(err)
	}
	f := os.NewFile(uintptr(fd), "sctp-listener")
	defer f.Close() // FileListener dups the descriptor.
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(port)}); err != nil {
		return nil, fmt.Errorf("bind sctp: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return nil, fmt.Errorf("listen sctp: %w", err)
	}
	return net.FileListener(f)
}

func sctpError(err error) error {
	if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ESOCKTNOSUPPORT) {
		return ErrNoSCTP
	}
	return fmt.Errorf("create sctp socket: %w", err)
}

// errUnprobeable marks a dial error that says nothing about policy (the
// prober could not even try), as opposed to a refused or timed-out attempt.
type errUnprobeable struct{ err error }

func (e errUnprobeable) Error() string { return e.err.Error() }
func (e errUnprobeable) Unwrap() error { return e.err }

// verdict is what one connection attempt found out.
type verdict struct {
	// Answered: the connection was established (TCP, SCTP) or the nonce
	// came back (UDP).
	Answered bool
	// Refused: the attempt was refused at once, by a TCP reset or an ICMP
	// port unreachable (ECONNREFUSED), rather than dropped.
	Refused bool
	// By is the NAMESPACE/NAME the listener answered with, when it could
	// be read ("" for SCTP, whose answer is not read).
	By string
}

// dial makes one connection attempt from inside src to dst, or returns an
// errUnprobeable when it could not be tried.
func dial(ctx context.Context, src ns.NetNS, dst netip.AddrPort, proto Protocol, timeout time.Duration) (verdict, error) {
	var v verdict
	err := src.Do(func(ns.NetNS) error {
		var err error
		switch proto {
		case TCP:
			v, err = dialTCP(ctx, dst, timeout)
		case UDP:
			v, err = dialUDP(ctx, dst, timeout)
		case SCTP:
			v, err = dialSCTP(ctx, dst, timeout)
		default:
			err = errUnprobeable{fmt.Errorf("protocol %q is not TCP, UDP or SCTP", proto)}
		}
		return err
	})
	if err == nil && ctx.Err() != nil {
		// A probe cut short by cancellation proves nothing either way.
		err = errUnprobeable{ctx.Err()}
	}
	return v, err
}

// denial reports whether a connection error is an answer from the network
// (a drop shows as a timeout, a reject as refused or unreachable) rather
// than a failure of the prober.
func denial(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPERM, syscall.EACCES, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func classify(err error) (verdict, error) {
	if err == nil {
		return verdict{Answered: true}, nil
	}
	if denial(err) {
		return verdict{Refused: errors.Is(err, syscall.ECONNREFUSED)}, nil
	}
	return verdict{}, errUnprobeable{err}
}

// dialTCP connects and reads the listener's name within timeout. An
// established connection is answered even when the name cannot be read:
// the handshake already crossed the policy both ways.
func dialTCP(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (verdict, error) {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return classify(err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	_ = c.SetReadDeadline(deadline)
	name, _ := io.ReadAll(io.LimitReader(c, maxName))
	return verdict{Answered: true, By: string(name)}, nil
}

// dialUDP sends a random nonce and waits for it to come back followed by
// the listener's name, resending a few times within timeout: a lost
// datagram is not a denial. Every resend goes from the same socket, so
// through a Service they all reach the backend the first one did.
func dialUDP(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (verdict, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return verdict{}, errUnprobeable{fmt.Errorf("open udp socket: %w", err)}
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()

	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	deadline := time.Now().Add(timeout)
	resend := max(timeout/4, 10*time.Millisecond)
	buf := make([]byte, len(nonce)+maxName)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := c.Write(nonce); err != nil {
			return classify(err)
		}
		next := time.Now().Add(resend)
		if next.After(deadline) {
			next = deadline
		}
		_ = c.SetReadDeadline(next)
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break // resend
				}
				return classify(err)
			}
			if bytes.HasPrefix(buf[:n], nonce) {
				return verdict{Answered: true, By: string(buf[len(nonce):n])}, nil
			}
		}
	}
	return verdict{}, nil
}

// dialSCTP connects a one-to-one style SCTP socket with a timeout. The
// listener's name is not read: the association being established is the
// answer.
func dialSCTP(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (verdict, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return verdict{}, errUnprobeable{sctpError(err)}
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return classify(err)
	}
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return verdict{}, nil
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int(min(left, 100*time.Millisecond)/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			return verdict{}, errUnprobeable{fmt.Errorf("poll sctp socket: %w", err)}
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return verdict{}, errUnprobeable{fmt.Errorf("read sctp socket error: %w", err)}
		}
		if soErr != 0 {
			return classify(syscall.Errno(soErr))
		}
		return verdict{Answered: true}, nil
	}
	return verdict{}, nil
}
