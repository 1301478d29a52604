//go:build linux

package datapath

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// External frontends of the host routing scenario: an externalIP whose one
// backend is the remote pod's 8080, as kube-proxy would masquerade it.
const extFrontend4, extFrontend6 = "198.51.100.10", "2001:db8:51::10"

// External frontends whose backends are pods of the node
// (policy.ServiceBackend.Local).
const extLocalFrontend4, extLocalFrontend6 = "198.51.100.11", "2001:db8:51::11"

// An external frontend (policy.ServiceEntry.External) is translated like
// a ClusterIP, but a new connection's first packet carries kube-proxy's
// masquerade mark and takes the node's stack, never host routing. Without
// a rule that reads the mark the backend sees the pod, through the stack
// (its forwarding counters move); with kube-proxy's POSTROUTING rule
// (mark 0x4000: MASQUERADE) in the node, it sees the node's address, and
// the replies, which the node's conntrack de-masquerades, reach the pod
// translated back to the frontend. Both families.
func TestPrivilegedServiceExternalFrontendMasquerade(t *testing.T) {
	testenv.Privileged(t)
	n := newPodNode(t)
	c := n.addPod(t, trHostC, trClient4, trClient6, true)
	remote := addRemote(t, n.node, nil, rtUplink, "")
	serveWhoAmI(t, remote, remoteV4+":8080")
	serveWhoAmI(t, remote, "["+remoteV6+"]:8080")
	st := rtState()
	tcp := policyapi.ProtoTCP
	st.Services[frontend(extFrontend4, tcp, 80)] = &policy.ServiceEntry{Service: "ns/far", Backends: backends(8080, remoteV4), External: true}
	st.Services[frontend(extFrontend6, tcp, 80)] = &policy.ServiceEntry{Service: "ns/far", Backends: backends(8080, remoteV6), External: true}
	mustApply(t, n.d, st)
	if err := n.node.Do(func(ns.NetNS) error { return n.d.SetUplinks([]string{rtUplink}) }); err != nil {
		t.Fatalf("set uplinks: %v", err)
	}

	// ask connects from C to dst, and checks the server saw want and the
	// node's stack forwarded the connection.
	ask := func(dst, want string) {
		t.Helper()
		before := forwarded(t, n.node)
		var got string
		var err error
		// Fresh links: IPv6 needs its link-local addresses past duplicate
		// address detection (about a second).
		for deadline := time.Now().Add(10 * time.Second); ; {
			if got, err = askTCP(c.ns, dst, time.Second); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("connect to %s: %v", dst, err)
		}
		if host, _, _ := net.SplitHostPort(got); host != want {
			t.Errorf("connect to %s: server saw %s, want %s", dst, got, want)
		}
		if forwarded(t, n.node) == before {
			t.Errorf("connect to %s: the node's stack forwarded nothing, want the connection (no host routing)", dst)
		}
	}
	ask(hostPort(extFrontend4, "80"), trClient4)
	ask(hostPort(extFrontend6, "80"), trClient6)

	// kube-proxy's rule, as its KUBE-POSTROUTING chain has it.
	err := n.node.Do(func(ns.NetNS) error {
		for _, cmd := range []string{"iptables", "ip6tables"} {
			mark := fmt.Sprintf("%#x/%#x", DefaultMasqueradeMark, DefaultMasqueradeMark)
			if out, err := exec.Command(cmd, "-t", "nat", "-A", "POSTROUTING", "-m", "mark", "--mark", mark, "-j", "MASQUERADE").CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %w: %s", cmd, err, out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("add the masquerade rule: %v", err)
	}
	ask(hostPort(extFrontend4, "80"), "10.98.0.1")
	ask(hostPort(extFrontend6, "80"), "fd98::1")
	// The ClusterIP is no external frontend: not masqueraded.
	got, err := askTCP(c.ns, hostPort(rtFrontend4, "80"), 2*time.Second)
	if host, _, _ := net.SplitHostPort(got); err != nil || host != trClient4 {
		t.Errorf("connect to the ClusterIP %s: server saw %q, %v; want %s", rtFrontend4, got, err, trClient4)
	}
}

// The mark of an external frontend is on every packet the client sends,
// the first (from svc_connect) and the later ones, from lockstep_svc_ct
// and from the flow cache: the node's conntrack may start the connection at
// any of them. A ClusterIP's packets and the replies carry none, nor do
// those of an external frontend's connection to a backend on the node
// (BACKEND_LOCAL: its ingress is judged on the client pod, as under
// kube-proxy before its masquerade). Both families, TCP and UDP.
func TestPrivilegedServiceExternalFrontendMarksEveryPacket(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	st := svcScenario()
	for _, fam := range svcFamilies {
		ext := map[string]string{"v4": extFrontend4, "v6": extFrontend6}[fam.name]
		extLocal := map[string]string{"v4": extLocalFrontend4, "v6": extLocalFrontend6}[fam.name]
		for proto, pp := range webPorts {
			st.Services[frontend(ext, proto, pp[0])] = &policy.ServiceEntry{Service: "ns/web", Backends: backends(pp[1], fam.backend), External: true}
			local := backends(pp[1], fam.backend)
			local[0].Local = true
			st.Services[frontend(extLocal, proto, pp[0])] = &policy.ServiceEntry{Service: "ns/web", Backends: local, External: true}
		}
	}
	mustApply(t, d, st)
	// mark runs prog on p and returns the tc action and the mark it left.
	mark := func(prog *ebpf.Program, p packet) (uint32, uint32) {
		t.Helper()
		raw := csumFrame(p)
		// The kernel writes a whole struct __sk_buff back; its mark is
		// the third 32-bit word, as in skbContext.
		out := make([]byte, 256)
		opts := &ebpf.RunOptions{Data: raw, DataOut: make([]byte, len(raw)+512),
			Context: skbContext{IngressIfindex: forwardedIfindex}, ContextOut: out}
		ret, err := prog.Run(opts)
		if err != nil {
			t.Fatalf("run %s: %v", prog, err)
		}
		return ret, binary.NativeEndian.Uint32(out[8:12])
	}
	for _, fam := range svcFamilies {
		ext := map[string]string{"v4": extFrontend4, "v6": extFrontend6}[fam.name]
		extLocal := map[string]string{"v4": extLocalFrontend4, "v6": extLocalFrontend6}[fam.name]
		for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP} {
			for _, to := range []struct {
				frontend string
				want     uint32
			}{{ext, DefaultMasqueradeMark}, {extLocal, 0}, {fam.web, 0}} {
				t.Run(fmt.Sprintf("%s/%s/%s", fam.name, protoName(proto), to.frontend), func(t *testing.T) {
					onOneCPU(t) // the later packets share one flow cache
					d.flushCT(t)
					fport, bport := webPorts[proto][0], webPorts[proto][1]
					req := packet{src: fam.pod, dst: to.frontend, proto: proto, sport: 41000, dport: fport, seq: 1000}
					if ret, got := mark(d.fromPod, req); ret != actOK || got != to.want {
						t.Errorf("first packet: %s, mark %#x; want OK, mark %#x", actName(ret), got, to.want)
					}
					reply := packet{src: fam.backend, dst: fam.pod, proto: proto, sport: bport, dport: 41000, tcpFlags: 0x12, seq: 5000, ackSeq: 1001}
					if ret, got := mark(d.toPod, reply); ret != actOK || got != 0 {
						t.Errorf("reply: %s, mark %#x; want OK, no mark", actName(ret), got)
					}
					// The first later packet finds the table's entry and
					// caches it, the second the cache; then the caches go.
					for _, path := range []string{"table", "flow cache", "table after the caches went"} {
						if path == "table after the caches went" {
							if err := d.bumpCTEpoch(); err != nil {
								t.Fatal(err)
							}
						}
						next := req
						next.tcpFlags, next.seq, next.ackSeq = 0x10, 1001, 5001
						if ret, got := mark(d.fromPod, next); ret != actOK || got != to.want {
							t.Errorf("later packet (%s): %s, mark %#x; want OK, mark %#x", path, actName(ret), got, to.want)
						}
					}
				})
			}
		}
	}
}
