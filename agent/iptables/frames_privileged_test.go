//go:build linux

package iptables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Frames for the real eBPF programs: built with every checksum right, and
// parsed back with every checksum checked, as the receiving kernel would.

// TCP flags the tests send and look for.
const (
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// wirePacket is one packet of a flow: addresses and ports (for ICMP echo
// the identifier stands for both ports, as conntrack has it), the
// protocol, the ICMP type and code, the TCP flags.
type wirePacket struct {
	src, dst           netip.AddrPort
	proto              uint8
	icmpType, icmpCode uint8
	tcpFlags           uint8
	hopLimit           uint8 // TTL or hop limit, 64 when zero
}

func (w wirePacket) String() string {
	s := fmt.Sprintf("%s -> %s proto %d", w.src, w.dst, w.proto)
	switch {
	case w.proto == policyapi.ProtoTCP:
		s += fmt.Sprintf(" flags %#02x", w.tcpFlags)
	case w.proto == protoICMP || w.proto == protoICMPv6:
		s += fmt.Sprintf(" type %d code %d", w.icmpType, w.icmpCode)
	}
	return s
}

// ttl is w's TTL or hop limit.
func (w wirePacket) ttl() uint8 {
	if w.hopLimit == 0 {
		return 64
	}
	return w.hopLimit
}

// isEcho reports whether an ICMP packet of this type is an echo request
// or reply, whose identifier both ends share.
func isEcho(proto, typ uint8) bool {
	return proto == protoICMP && (typ == 0 || typ == 8) || proto == protoICMPv6 && (typ == 128 || typ == 129)
}

// buildFrame is w as an Ethernet frame with a short payload and every
// checksum right.
func buildFrame(w wirePacket) []byte {
	payload := []byte("lockstep")
	var l4 []byte
	switch w.proto {
	case policyapi.ProtoTCP:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], w.src.Port())
		binary.BigEndian.PutUint16(l4[2:], w.dst.Port())
		binary.BigEndian.PutUint32(l4[4:], 1000)
		if w.tcpFlags&tcpACK != 0 {
			binary.BigEndian.PutUint32(l4[8:], 5000)
		}
		l4[12] = 5 << 4
		l4[13] = w.tcpFlags
		binary.BigEndian.PutUint16(l4[14:], 65535)
	case policyapi.ProtoUDP:
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:], w.src.Port())
		binary.BigEndian.PutUint16(l4[2:], w.dst.Port())
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(payload)))
	case policyapi.ProtoSCTP:
		l4 = make([]byte, 12)
		binary.BigEndian.PutUint16(l4[0:], w.src.Port())
		binary.BigEndian.PutUint16(l4[2:], w.dst.Port())
		binary.BigEndian.PutUint32(l4[4:], 0x5c7a9e01) // verification tag
	case protoICMP, protoICMPv6:
		l4 = make([]byte, 8)
		l4[0], l4[1] = w.icmpType, w.icmpCode
		if isEcho(w.proto, w.icmpType) {
			binary.BigEndian.PutUint16(l4[4:], w.src.Port())
			binary.BigEndian.PutUint16(l4[6:], 1)
		}
	default:
		l4 = make([]byte, 8)
	}
	l4 = append(l4, payload...)
	frame := make([]byte, 14, 14+40+len(l4))
	copy(frame, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	src, dst := w.src.Addr(), w.dst.Addr()
	if src.Is4() {
		binary.BigEndian.PutUint16(frame[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, w.ttl(), w.proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], fold(sum16(0, ip)))
		frame = append(frame, ip...)
	} else {
		binary.BigEndian.PutUint16(frame[12:], 0x86dd)
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, w.proto, w.ttl()
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		frame = append(frame, ip...)
	}
	frame = append(frame, l4...)
	setChecksum(w.proto, src, dst, frame[len(frame)-len(l4):])
	return frame
}

// parseWirePacket parses a frame of IPv4 or IPv6 (without extension
// headers) and checks its checksums.
func parseWirePacket(raw []byte) (wirePacket, error) {
	var w wirePacket
	if len(raw) < 14 {
		return w, errors.New("short frame")
	}
	var src, dst netip.Addr
	var l4 []byte
	switch binary.BigEndian.Uint16(raw[12:]) {
	case 0x0800:
		if len(raw) < 34 {
			return w, errors.New("short IPv4 packet")
		}
		ihl, total := int(raw[14]&0xf)*4, int(binary.BigEndian.Uint16(raw[16:]))
		if 14+total > len(raw) || total < ihl || ihl < 20 {
			return w, fmt.Errorf("IPv4 total length %d, %d bytes after Ethernet", total, len(raw)-14)
		}
		if fold(sum16(0, raw[14:14+ihl])) != 0 {
			return w, errors.New("IPv4 header checksum is wrong")
		}
		src, dst = netip.AddrFrom4([4]byte(raw[26:30])), netip.AddrFrom4([4]byte(raw[30:34]))
		w.proto, l4 = raw[23], raw[14+ihl:14+total]
	case 0x86dd:
		if len(raw) < 54 {
			return w, errors.New("short IPv6 packet")
		}
		plen := int(binary.BigEndian.Uint16(raw[18:]))
		if 54+plen > len(raw) {
			return w, fmt.Errorf("IPv6 payload length %d, %d bytes after the header", plen, len(raw)-54)
		}
		src, dst = netip.AddrFrom16([16]byte(raw[22:38])), netip.AddrFrom16([16]byte(raw[38:54]))
		w.proto, l4 = raw[20], raw[54:54+plen]
	default:
		return w, fmt.Errorf("ethertype %#04x", binary.BigEndian.Uint16(raw[12:]))
	}
	if len(l4) < 8 {
		return w, errors.New("short L4 header")
	}
	var sport, dport uint16
	switch w.proto {
	case policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP:
		sport, dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		if w.proto == policyapi.ProtoTCP {
			if len(l4) < 20 {
				return w, errors.New("short TCP header")
			}
			w.tcpFlags = l4[13]
		}
	case protoICMP, protoICMPv6:
		w.icmpType, w.icmpCode = l4[0], l4[1]
		if isEcho(w.proto, w.icmpType) {
			sport = binary.BigEndian.Uint16(l4[4:])
			dport = sport
		}
	}
	w.src, w.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	if err := checkChecksum(w.proto, src, dst, l4); err != nil {
		return w, fmt.Errorf("%v: %w", w, err)
	}
	return w, nil
}

// csumAt is the offset of proto's checksum in its header, -1 for none
// that sums 16-bit words (SCTP has a CRC32c).
func csumAt(proto uint8) int {
	switch proto {
	case policyapi.ProtoTCP:
		return 16
	case policyapi.ProtoUDP:
		return 6
	case protoICMP, protoICMPv6:
		return 2
	}
	return -1
}

// l4Sum is the one's complement sum of l4 and, but for ICMP, its pseudo
// header.
func l4Sum(proto uint8, src, dst netip.Addr, l4 []byte) uint32 {
	var sum uint32
	if proto != protoICMP {
		sum = sum16(sum16(0, src.AsSlice()), dst.AsSlice()) + uint32(proto) + uint32(len(l4))>>16 + uint32(len(l4))&0xffff
	}
	return sum16(sum, l4)
}

func setChecksum(proto uint8, src, dst netip.Addr, l4 []byte) {
	if proto == policyapi.ProtoSCTP {
		binary.LittleEndian.PutUint32(l4[8:], sctpCRC(l4))
		return
	}
	at := csumAt(proto)
	if at < 0 {
		return
	}
	clear(l4[at : at+2])
	c := fold(l4Sum(proto, src, dst, l4))
	if c == 0 && proto == policyapi.ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[at:], c)
}

func checkChecksum(proto uint8, src, dst netip.Addr, l4 []byte) error {
	if proto == policyapi.ProtoSCTP {
		if got, want := binary.LittleEndian.Uint32(l4[8:]), sctpCRC(l4); got != want {
			return fmt.Errorf("SCTP CRC32c %#08x, want %#08x", got, want)
		}
		return nil
	}
	at := csumAt(proto)
	if at < 0 || proto == policyapi.ProtoUDP && src.Is4() && binary.BigEndian.Uint16(l4[at:]) == 0 {
		return nil
	}
	if fold(l4Sum(proto, src, dst, l4)) != 0 {
		return fmt.Errorf("protocol %d checksum %#04x is wrong", proto, binary.BigEndian.Uint16(l4[at:]))
	}
	return nil
}

// sctpCRC is the CRC32c of an SCTP packet with its checksum field zero.
func sctpCRC(l4 []byte) uint32 {
	c := append([]byte(nil), l4...)
	clear(c[8:12])
	return crc32.Checksum(c, crc32.MakeTable(crc32.Castagnoli))
}

// sum16 adds b to sum as 16-bit big-endian words (b padded to even
// length).
func sum16(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// fold is the one's complement of sum folded to 16 bits.
func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
