//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: connrate serve [-listen :8080]
       connrate wait
       connrate connect -addr ADDR:PORT [-duration 5s] [-workers 8] [-ports 1024-65535]`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], stderr)
	case "wait":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		<-ctx.Done()
		stop()
	case "connect":
		err = connect(args[1:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "connrate:", err)
		return 1
	}
	return 0
}

// serve accepts connections on -listen and closes each at once, until
// SIGTERM or SIGINT.
func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8080", "TCP address to accept connections on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	return acceptAll(ctx, lis)
}

// acceptAll accepts connections on lis and closes each at once until ctx
// ends.
func acceptAll(ctx context.Context, lis net.Listener) error {
	go func() {
		<-ctx.Done()
		lis.Close()
	}()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// EMFILE and the like: wait rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.Close()
	}
}

// Result is what connect prints, one JSON object on one line.
type Result struct {
	Connections uint64  `json:"connections"`
	Failures    uint64  `json:"failures"`
	Seconds     float64 `json:"seconds"`
	// PerSecond is Connections / Seconds.
	PerSecond float64 `json:"perSecond"`
	// ConnectP50, ConnectP99 and ConnectMax are how long connect took
	// (SYN sent to SYN-ACK received, plus the system call), in
	// microseconds, over the connections made: a lost SYN shows as a
	// retransmission a second later.
	ConnectP50 float64 `json:"connectP50Micros"`
	ConnectP99 float64 `json:"connectP99Micros"`
	ConnectMax float64 `json:"connectMaxMicros"`
	// PortsExhausted: the run ended before its duration because every
	// source port of -ports had been used.
	PortsExhausted bool `json:"portsExhausted,omitempty"`
	// FirstFailure says why the first failed connection failed.
	FirstFailure string `json:"firstFailure,omitempty"`
}

// connect measures the connection rate to -addr.
func connect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "IPv4 address and port to connect to (required)")
	duration := fs.Duration("duration", 5*time.Second, "how long to open and close connections")
	workers := fs.Int("workers", 8, "goroutines opening connections, each one at a time")
	portRange := fs.String("ports", "1024-65535", "source ports, each used by one connection only; the run ends early when they are used up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(*addr)
	switch {
	case err != nil:
		return fmt.Errorf("parse -addr: %w", err)
	case !ap.Addr().Is4():
		return fmt.Errorf("-addr %s: want an IPv4 address", ap)
	case *workers < 1 || *duration <= 0:
		return errors.New("-workers and -duration must be positive")
	}
	lo, hi, err := parsePorts(*portRange)
	if err != nil {
		return err
	}
	res, err := measure(&syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, *workers, *duration, lo, hi)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// parsePorts reads LO-HI.
func parsePorts(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if ok {
		lo, err = strconv.Atoi(a)
		if err == nil {
			hi, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("-ports %q: want LO-HI within 1-65535", s)
	}
	return lo, hi, nil
}

// hangAfter is how long after the end of the run measure waits for a
// connection still being established: one whose SYN went unanswered
// waits for the kernel's retransmissions, minutes.
const hangAfter = 5 * time.Second

// measure opens and closes connections to sa from workers goroutines
// until d has passed or every source port from lo to hi has been used.
//
// Every connection has a source port of its own. A connection's tuple is
// never used again, so that each one is new to every connection tracker
// on its way (netfilter's, lockstep's), as connections from many clients
// are, and none is decided by what an earlier connection of the same tuple
// left behind.
func measure(sa *syscall.SockaddrInet4, workers int, d time.Duration, lo, hi int) (Result, error) {
	var (
		ok, failed atomic.Uint64
		next       atomic.Int64
		exhausted  atomic.Bool
		first      sync.Once
		why        string
		wg         sync.WaitGroup
	)
	next.Store(int64(lo))
	took := make([][]time.Duration, workers) // each worker's connects
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				port := next.Add(1) - 1
				if port > int64(hi) {
					exhausted.Store(true)
					return
				}
				t, err := openClose(int(port), sa)
				switch {
				case errors.Is(err, syscall.EADDRINUSE):
					// Someone else's port: not a connection.
				case err != nil:
					failed.Add(1)
					first.Do(func() { why = err.Error() })
				default:
					ok.Add(1)
					took[w] = append(took[w], t)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d + hangAfter):
		return Result{}, fmt.Errorf("connections to %s still not established %s after the run ended: is a backend not answering?", netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)), hangAfter)
	}
	secs := time.Since(start).Seconds()
	all := slices.Concat(took...)
	slices.Sort(all)
	return Result{
		Connections: ok.Load(), Failures: failed.Load(), Seconds: secs, PerSecond: float64(ok.Load()) / secs,
		ConnectP50: micros(benchkit.Percentile(all, 50)), ConnectP99: micros(benchkit.Percentile(all, 99)), ConnectMax: micros(benchkit.Percentile(all, 100)),
		PortsExhausted: exhausted.Load(), FirstFailure: why,
	}, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// openClose opens one connection from port to sa, blocking until it is
// established, and closes it with a reset; it returns how long connect
// took. The socket has no SO_SNDTIMEO: with one, a signal to the thread
// (the Go runtime's) would fail connect with EINTR instead of restarting
// it.
func openClose(port int, sa *syscall.SockaddrInet4) (time.Duration, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port}); err != nil {
		return 0, fmt.Errorf("bind port %d: %w", port, err)
	}
	start := time.Now()
	if err := syscall.Connect(fd, sa); err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	took := time.Since(start)
	if err := syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0}); err != nil {
		return 0, fmt.Errorf("set SO_LINGER: %w", err)
	}
	return took, nil
}
