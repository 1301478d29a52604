//go:build linux

package main

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sockaddr is the loopback address of lis.
func sockaddr(t *testing.T, lis net.Listener) *syscall.SockaddrInet4 {
	t.Helper()
	ap := netip.MustParseAddrPort(lis.Addr().String())
	return &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}

func TestMeasureUsesEachPortOnce(t *testing.T) {
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go acceptAll(ctx, lis)
	// 300 ports, far more time than they need: the run ends when they
	// are used up, each by one connection (or skipped when taken).
	res, err := measure(sockaddr(t, lis), 4, 30*time.Second, 41000, 41299)
	if err != nil {
		t.Fatal(err)
	}
	if !res.PortsExhausted || res.Connections == 0 || res.Connections > 300 || res.Failures != 0 {
		t.Fatalf("measure = %+v; want the 300 ports used up by as many connections at most, none failed", res)
	}
	if res.Seconds >= 30 || res.PerSecond <= 0 {
		t.Fatalf("measure = %+v; want it to end early with a rate", res)
	}
	if res.ConnectP50 <= 0 || res.ConnectP50 > res.ConnectP99 || res.ConnectP99 > res.ConnectMax {
		t.Fatalf("measure = %+v; want connect times 0 < p50 ≤ p99 ≤ max", res)
	}
}

func TestMeasureCountsRefusals(t *testing.T) {
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sa := sockaddr(t, lis)
	lis.Close() // nothing listens: every connection is refused
	res, err := measure(sa, 2, 200*time.Millisecond, 42000, 42099)
	if err != nil {
		t.Fatal(err)
	}
	if res.Connections != 0 || res.Failures == 0 || !strings.Contains(res.FirstFailure, "connection refused") {
		t.Fatalf("measure = %+v; want refusals only", res)
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"1024-65535", 1024, 65535, true},
		{"80-80", 80, 80, true},
		{"2000-1000", 0, 0, false},
		{"0-10", 0, 0, false},
		{"1-70000", 0, 0, false},
		{"1024", 0, 0, false},
	} {
		lo, hi, err := parsePorts(tc.in)
		if (err == nil) != tc.ok || lo != tc.lo || hi != tc.hi {
			t.Errorf("parsePorts(%q) = %d, %d, %v", tc.in, lo, hi, err)
		}
	}
}
