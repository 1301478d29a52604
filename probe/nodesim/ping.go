//go:build linux

package nodesim

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Ping sends one ICMP echo request from inside n to dst and waits up to
// timeout for the matching reply.
func Ping(n ns.NetNS, dst netip.Addr, timeout time.Duration) error {
	return n.Do(func(ns.NetNS) error { return ping(dst, timeout) })
}

func ping(dst netip.Addr, timeout time.Duration) error {
	network, proto := "ip4:icmp", 1
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, proto = "ip6:ipv6-icmp", 58
		typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	conn, err := icmp.ListenPacket(network, "")
	if err != nil {
		return fmt.Errorf("open icmp socket: %w", err)
	}
	defer conn.Close()

	id, seq := os.Getpid()&0xffff, int(time.Now().UnixNano()&0x7fff)
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("lockstep")}}
	wire, err := msg.Marshal(nil)
	if err != nil {
		return fmt.Errorf("encode echo: %w", err)
	}
	if _, err := conn.WriteTo(wire, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("send echo to %s: %w", dst, err)
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for {
		if err := conn.SetReadDeadline(deadline); err != nil {
			return err
		}
		n, peer, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply from %s within %s: %w", dst, timeout, err)
		}
		got, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || got.Type != reply {
			continue
		}
		echo, ok := got.Body.(*icmp.Echo)
		if !ok || echo.ID != id || echo.Seq != seq {
			continue
		}
		if ip, ok := peer.(*net.IPAddr); ok && !ip.IP.Equal(dst.AsSlice()) {
			continue
		}
		return nil
	}
}
