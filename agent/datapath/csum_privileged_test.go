//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	policyapi "lockstep.dev/lockstep/agent/policy/api"

	"lockstep.dev/lockstep/test/testenv"
)

// Legacy ethtool commands (linux/ethtool.h) that switch a device's
// transmit checksum offload, which every kernel still takes.
const (
	ethtoolSetTxCsum = 0x17 // ETHTOOL_STXCSUM
)

// setTxChecksum switches transmit checksum offload of link in n on or
// off. Off, the kernel finishes a checksum left to offload
// (CHECKSUM_PARTIAL) in software before the device sends it, and a
// packet the pod sends leaves with its checksum complete.
func setTxChecksum(n ns.NetNS, link string, on bool) error {
	return n.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open ethtool socket: %w", err)
		}
		defer unix.Close(fd)
		val := struct{ cmd, data uint32 }{cmd: ethtoolSetTxCsum}
		if on {
			val.data = 1
		}
		var ifr struct {
			name [unix.IFNAMSIZ]byte
			data uintptr
			_    [16]byte
		}
		copy(ifr.name[:], link)
		ifr.data = uintptr(unsafe.Pointer(&val))
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
			return fmt.Errorf("set tx checksum offload of %s to %v: %w", link, on, errno)
		}
		return nil
	})
}

// Translated packets keep every checksum right, whether the pod left its
// checksum to offload (from_pod and to_pod then see CHECKSUM_PARTIAL and
// update the pseudo header's sum) or sent it complete (CHECKSUM_NONE: the
// whole change is taken from the checksum). The receiving pod verifies
// each one, for the node's side finishes offloaded checksums in software
// (its veths have transmit offload off): a wrong checksum is dropped, and
// the connection through the frontend, whose port differs from the
// backend's, fails.
func TestPrivilegedServiceTrafficChecksums(t *testing.T) {
	testenv.Privileged(t)
	n, c, b := trSetup(t, trState(true, true))
	for _, hostIf := range []string{trHostC, trHostB} {
		if err := setTxChecksum(n.node, hostIf, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []struct {
		name      string
		podTxCsum bool
	}{
		{"left to offload", true},
		{"complete", false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			for _, p := range []podNet{c, b} {
				if err := setTxChecksum(p.ns, p.hostIf+"p", mode.podTxCsum); err != nil {
					t.Fatal(err)
				}
			}
			frontendsAnswer(t, c)
		})
	}
}

// testSkbChecksumComplete is BPF_F_TEST_SKB_CHECKSUM_COMPLETE (Linux
// 6.16): the test run gives the skb a CHECKSUM_COMPLETE sum of the packet
// and fails with EBADMSG when the program left it wrong.
const testSkbChecksumComplete = 1 << 2

// A translated packet whose skb carries CHECKSUM_COMPLETE (a NIC's sum of
// the whole packet, which only bpf_l4_csum_replace keeps right) has its
// L4 checksum updated through the helper: the kernel's check of the
// skb's sum after the run passes, for the first packet and the tracked
// ones after it, requests and replies, TCP and UDP, both families.
func TestPrivilegedServiceChecksumComplete(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, svcScenario())
	runComplete := func(t *testing.T, prog *ebpf.Program, what string, p packet) wire {
		t.Helper()
		opts := runOptions(csumFrame(p), false)
		opts.DataOut = make([]byte, len(opts.Data)+512)
		opts.Flags = testSkbChecksumComplete
		ret, err := prog.Run(opts)
		if errors.Is(err, unix.EINVAL) {
			testenv.Missing(t, "BPF_PROG_TEST_RUN's BPF_F_TEST_SKB_CHECKSUM_COMPLETE (Linux 6.16)", err)
		}
		if err != nil {
			t.Fatalf("%s: %v (EBADMSG: the skb's CHECKSUM_COMPLETE sum was left wrong)", what, err)
		}
		if ret != actOK {
			t.Fatalf("%s: %s, want OK", what, actName(ret))
		}
		return mustWire(t, what, opts.DataOut)
	}
	for _, fam := range svcFamilies {
		for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP} {
			t.Run(fam.name+"/"+protoName(proto), func(t *testing.T) {
				d.flushCT(t)
				fport, bport := webPorts[proto][0], webPorts[proto][1]
				payload := []byte("complete")
				req := packet{src: fam.pod, dst: fam.web, proto: proto, sport: 42000, dport: fport, tcpFlags: 0x02, seq: 1000, payload: payload}
				reply := packet{src: fam.backend, dst: fam.pod, proto: proto, sport: bport, dport: 42000, tcpFlags: 0x12, seq: 5000, ackSeq: 1001, payload: payload}
				if w := runComplete(t, d.fromPod, "first request", req); w.dst != addr(fam.backend) || w.dport != bport {
					t.Errorf("first request to %s:%d, want %s:%d", w.dst, w.dport, fam.backend, bport)
				}
				if w := runComplete(t, d.toPod, "reply", reply); w.src != addr(fam.web) || w.sport != fport {
					t.Errorf("reply from %s:%d, want %s:%d", w.src, w.sport, fam.web, fport)
				}
				next := req
				next.tcpFlags, next.seq, next.ackSeq = 0x10, 1001, 5001
				if w := runComplete(t, d.fromPod, "tracked request", next); w.dst != addr(fam.backend) || w.dport != bport {
					t.Errorf("tracked request to %s:%d, want %s:%d", w.dst, w.dport, fam.backend, bport)
				}
			})
		}
	}
}
