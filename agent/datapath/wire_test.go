//go:build linux

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Frames with real checksums, and the parser of what the programs send
// back: the Service tests check every checksum a translation or a refusal
// leaves, as the receiving kernel would.

// actRedirect is TC_ACT_REDIRECT: the programs hand a hairpin packet or a
// refusal straight back to the pod (bpf_redirect_peer).
const actRedirect = 7

// wire is a parsed frame.
type wire struct {
	src, dst     netip.Addr
	proto        uint8
	ttl          uint8
	sport, dport uint16
	tcpFlags     uint8
	seq, ackSeq  uint32
	icmpType     uint8
	icmpCode     uint8
	macs         [12]byte
	ip           []byte // the IP header (IPv6: with extension headers)
	l4           []byte // from the L4 header to the end of the IP packet
}

// parseWire parses an Ethernet frame of IPv4 or IPv6 without extension
// headers.
func parseWire(raw []byte) (wire, error) {
	var w wire
	if len(raw) < 14 {
		return w, errors.New("short frame")
	}
	copy(w.macs[:], raw[:12])
	switch binary.BigEndian.Uint16(raw[12:]) {
	case 0x0800:
		if len(raw) < 34 {
			return w, errors.New("short IPv4 packet")
		}
		ihl := int(raw[14]&0xf) * 4
		total := int(binary.BigEndian.Uint16(raw[16:]))
		if 14+total > len(raw) || total < ihl {
			return w, fmt.Errorf("IPv4 total length %d, frame has %d bytes after Ethernet", total, len(raw)-14)
		}
		w.ip = raw[14 : 14+ihl]
		w.l4 = raw[14+ihl : 14+total]
		w.src = netip.AddrFrom4([4]byte(raw[26:30]))
		w.dst = netip.AddrFrom4([4]byte(raw[30:34]))
		w.proto, w.ttl = raw[23], raw[22]
	case 0x86dd:
		if len(raw) < 54 {
			return w, errors.New("short IPv6 packet")
		}
		plen := int(binary.BigEndian.Uint16(raw[18:]))
		if 54+plen > len(raw) {
			return w, fmt.Errorf("IPv6 payload length %d, frame has %d bytes after the header", plen, len(raw)-54)
		}
		w.ip = raw[14:54]
		w.l4 = raw[54 : 54+plen]
		w.src = netip.AddrFrom16([16]byte(raw[22:38]))
		w.dst = netip.AddrFrom16([16]byte(raw[38:54]))
		w.proto, w.ttl = raw[20], raw[21]
	default:
		return w, fmt.Errorf("ethertype %#04x", binary.BigEndian.Uint16(raw[12:]))
	}
	switch w.proto {
	case policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP:
		if len(w.l4) < 8 {
			return w, errors.New("short L4 header")
		}
		w.sport = binary.BigEndian.Uint16(w.l4)
		w.dport = binary.BigEndian.Uint16(w.l4[2:])
		if w.proto == policyapi.ProtoTCP {
			if len(w.l4) < 20 {
				return w, errors.New("short TCP header")
			}
			w.seq = binary.BigEndian.Uint32(w.l4[4:])
			w.ackSeq = binary.BigEndian.Uint32(w.l4[8:])
			w.tcpFlags = w.l4[13]
		}
	case protoICMP, protoICMPv6:
		if len(w.l4) < 8 {
			return w, errors.New("short ICMP header")
		}
		w.icmpType, w.icmpCode = w.l4[0], w.l4[1]
	}
	return w, nil
}

// sum16 is the one's complement sum of b (padded to an even length).
func sum16(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// pseudoSum sums the pseudo header of w's upper-layer protocol proto.
func (w wire) pseudoSum(proto uint8) uint32 {
	var sum uint32
	s, d := w.src.AsSlice(), w.dst.AsSlice()
	sum = sum16(sum, s)
	sum = sum16(sum, d)
	sum += uint32(proto)
	if w.src.Is4() {
		return sum + uint32(len(w.l4))
	}
	return sum + uint32(len(w.l4))>>16 + uint32(len(w.l4))&0xffff
}

// csumAt is the offset of the checksum in w's L4 header, -1 for none.
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

// sctpCRC is the CRC32c of an SCTP packet, as its checksum field holds it
// (little-endian).
func sctpCRC(l4 []byte) uint32 {
	c := append([]byte(nil), l4...)
	clear(c[8:12])
	return crc32.Checksum(c, crc32.MakeTable(crc32.Castagnoli))
}

// withChecksums fills in every checksum of the frame raw (IPv4 header,
// TCP, UDP, ICMP, ICMPv6, SCTP) and returns it.
func withChecksums(raw []byte) []byte {
	w, err := parseWire(raw)
	if err != nil {
		panic(err)
	}
	if w.src.Is4() {
		clear(w.ip[10:12])
		binary.BigEndian.PutUint16(w.ip[10:], fold(sum16(0, w.ip)))
	}
	if w.proto == policyapi.ProtoSCTP {
		binary.LittleEndian.PutUint32(w.l4[8:], sctpCRC(w.l4))
		return raw
	}
	at := csumAt(w.proto)
	if at < 0 {
		return raw
	}
	clear(w.l4[at : at+2])
	var sum uint32
	if w.proto != protoICMP {
		sum = w.pseudoSum(w.proto)
	}
	c := fold(sum16(sum, w.l4))
	if c == 0 && w.proto == policyapi.ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(w.l4[at:], c)
	return raw
}

// checkChecksums returns an error naming every checksum of w that is
// wrong. An IPv4 UDP checksum of zero (none) is right.
func (w wire) checkChecksums() error {
	var errs []error
	if w.src.Is4() && fold(sum16(0, w.ip)) != 0 {
		errs = append(errs, fmt.Errorf("IPv4 header checksum %#04x is wrong", binary.BigEndian.Uint16(w.ip[10:])))
	}
	if w.proto == policyapi.ProtoSCTP {
		if got, want := binary.LittleEndian.Uint32(w.l4[8:]), sctpCRC(w.l4); got != want {
			errs = append(errs, fmt.Errorf("SCTP CRC32c %#08x, want %#08x", got, want))
		}
		return errors.Join(errs...)
	}
	at := csumAt(w.proto)
	if at < 0 {
		return errors.Join(errs...)
	}
	if w.proto == policyapi.ProtoUDP && w.src.Is4() && binary.BigEndian.Uint16(w.l4[at:]) == 0 {
		return errors.Join(errs...)
	}
	var sum uint32
	if w.proto != protoICMP {
		sum = w.pseudoSum(w.proto)
	}
	if fold(sum16(sum, w.l4)) != 0 {
		errs = append(errs, fmt.Errorf("%s checksum %#04x is wrong", protoName(w.proto), binary.BigEndian.Uint16(w.l4[at:])))
	}
	return errors.Join(errs...)
}

func protoName(p uint8) string {
	return map[uint8]string{policyapi.ProtoTCP: "TCP", policyapi.ProtoUDP: "UDP", policyapi.ProtoSCTP: "SCTP", protoICMP: "ICMP", protoICMPv6: "ICMPv6"}[p]
}

// csumFrame is frame(p) with every checksum right.
func csumFrame(p packet) []byte { return withChecksums(frame(p)) }

// runOut runs prog on raw, a frame the node forwarded, and returns the tc
// action and the frame as the program left it.
func runOut(tb testing.TB, prog *ebpf.Program, raw []byte) (uint32, []byte) {
	tb.Helper()
	opts := runOptions(raw, false)
	opts.DataOut = make([]byte, len(raw)+512)
	ret, err := prog.Run(opts)
	if err != nil {
		tb.Fatalf("run %s: %v", prog, err)
	}
	return ret, opts.DataOut
}

// TestChecksumHelpers checks the helpers the Service tests rely on
// against frames whose checksums are known.
func TestChecksumHelpers(t *testing.T) {
	for _, p := range []packet{
		{src: "10.0.0.1", dst: "10.0.0.2", proto: policyapi.ProtoTCP, sport: 1234, dport: 80, payload: []byte("abc")},
		{src: "fd00::1", dst: "fd00::2", proto: policyapi.ProtoUDP, sport: 1234, dport: 53, payload: []byte("hello")},
		{src: "10.0.0.1", dst: "10.0.0.2", proto: policyapi.ProtoSCTP, sport: 1, dport: 9000},
		{src: "fd00::1", dst: "fd00::2", proto: protoICMPv6, sport: 7},
	} {
		raw := csumFrame(p)
		w, err := parseWire(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.checkChecksums(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
		w.l4[len(w.l4)-1] ^= 1 // one bit of the payload flipped
		if w.checkChecksums() == nil {
			t.Errorf("%+v: a flipped bit went unnoticed", p)
		}
	}
	// A known IPv4 header (RFC 1071's example set aside, a real one).
	hdr := []byte{0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7}
	if fold(sum16(0, hdr)) != 0 {
		t.Errorf("a correct IPv4 header does not sum to 0xffff")
	}
}
