//go:build linux

package datapath

import (
	"testing"
	"time"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// The flow cache (bpf/lib/ct.h) passes a packet on a copy of a conntrack
// entry only while the copy is of the packet's own connection, allows the
// packet's direction and sender, is younger than its deadline and was made
// in the current epoch. Each case writes one copy into every slot of
// every CPU, with the conntrack table empty, and sends the reply (an ACK)
// of an egress connection: policy alone drops it (ingress allows 8080
// only), so only the cache can pass it. A packet with SYN, FIN or RST
// never takes its verdict from the cache (see TCP close in bpf/lib/ct.h).
func TestPrivilegedFlowCache(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(true, true))
	reply := with(flowReply, tcpACK)
	key := requestKey()
	egressByPod := bpfmaps.CTAllowed(uint8(policyapi.Egress), 0)

	for _, tc := range []struct {
		name  string
		edit  func(s *bpfmaps.CTCacheSlot)
		want  uint32
		flags uint8 // of the reply, ACK when zero
	}{
		{"a live copy passes the reply", func(*bpfmaps.CTCacheSlot) {}, actOK, 0},
		{"a live copy does not pass a SYN-ACK", func(*bpfmaps.CTCacheSlot) {}, actShot, tcpSYN | tcpACK},
		{"a live copy does not pass a FIN", func(*bpfmaps.CTCacheSlot) {}, actShot, tcpFIN | tcpACK},
		{"a live copy does not pass a RST", func(*bpfmaps.CTCacheSlot) {}, actShot, tcpRST},
		{"empty", func(s *bpfmaps.CTCacheSlot) { *s = bpfmaps.CTCacheSlot{} }, actShot, 0},
		{"made before the epoch changed", func(s *bpfmaps.CTCacheSlot) { s.Epoch-- }, actShot, 0},
		{"past its deadline", func(s *bpfmaps.CTCacheSlot) { s.ValidUntil = coarseNow(t) - uint64(time.Millisecond) }, actShot, 0},
		{"another port", func(s *bpfmaps.CTCacheSlot) { s.Key.Port[0]++ }, actShot, 0},
		{"another address", func(s *bpfmaps.CTCacheSlot) { s.Key.Addr[1][15]++ }, actShot, 0},
		{"another endpoint", func(s *bpfmaps.CTCacheSlot) { s.Key.Ifindex++ }, actShot, 0},
		{"another protocol", func(s *bpfmaps.CTCacheSlot) { s.Key.Proto = policyapi.ProtoUDP }, actShot, 0},
		{"opened in the other direction", func(s *bpfmaps.CTCacheSlot) { s.Flags = bpfmaps.CTAllowed(uint8(policyapi.Ingress), 0) }, actShot, 0},
		{"opened by the other end", func(s *bpfmaps.CTCacheSlot) { s.Flags = bpfmaps.CTAllowed(uint8(policyapi.Egress), 1) }, actShot, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			s := bpfmaps.CTCacheSlot{
				Key: key, Epoch: d.ctEpochNow(t), Flags: egressByPod,
				ValidUntil: coarseNow(t) + uint64(10*time.Second),
			}
			tc.edit(&s)
			d.fillCTCache(t, s)
			p := reply
			if tc.flags != 0 {
				p = with(reply, tc.flags)
			}
			if got := run(t, d.toPod, p); got != tc.want {
				t.Errorf("reply: got %s, want %s", actName(got), actName(tc.want))
			}
		})
	}
}

// TestPrivilegedFlowCacheFilledByConntrackHits: a packet that finds its
// connection in lockstep_ct leaves a copy in its CPU's cache, which then
// serves the connection while the entry is gone; a flush drops the copy.
func TestPrivilegedFlowCacheFilledByConntrackHits(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(true, true))
	d.flushCT(t)
	req, reply := flowRequest, with(flowReply, tcpACK)
	onOneCPU(t)
	if got := run(t, d.fromPod, req); got != actOK {
		t.Fatalf("request: got %s, want OK", actName(got))
	}
	if got := run(t, d.toPod, reply); got != actOK {
		t.Fatalf("reply (a conntrack hit): got %s, want OK", actName(got))
	}
	es, err := bpfmaps.Dump(d.pinRoot, bpfmaps.CTCacheMap)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Value.(bpfmaps.CTCacheSlot).Key != requestKey() {
		t.Fatalf("flow cache holds %+v, want one copy of %+v", es, requestKey())
	}
	// Delete the entry behind the cache's back: the copy still passes.
	deleteCTEntries(t, d)
	if got := run(t, d.toPod, reply); got != actOK {
		t.Fatalf("reply with the entry gone: got %s, want OK from the flow cache", actName(got))
	}
	d.flushCT(t) // bumps the epoch
	if got := run(t, d.toPod, reply); got != actShot {
		t.Errorf("reply after a flush: got %s, want SHOT (ingress allows 8080 only)", actName(got))
	}
}

// The connection the conntrack tests open: from the pod's port 41000 to
// 10.0.0.2:80, which the scenario's egress allows, and its reply, which
// only conntrack lets in (ingress allows 8080 only).
var (
	flowRequest = packet{src: podV4, dst: "10.0.0.2", proto: policyapi.ProtoTCP, sport: 41000, dport: 80}
	flowReply   = packet{src: "10.0.0.2", dst: podV4, proto: policyapi.ProtoTCP, sport: 80, dport: 41000}
)

// requestKey is flowRequest's conntrack key at the test endpoint: 10.0.0.1
// orders before 10.0.0.2, so the pod is end 0.
func requestKey() bpfmaps.CTKey {
	return bpfmaps.CTKey{
		Ifindex: loIfindex, Proto: policyapi.ProtoTCP, Port: [2]uint16{41000, 80},
		Addr: [2]bpfmaps.Addr{bpfmaps.AddrFrom(addr(podV4)), bpfmaps.AddrFrom(addr("10.0.0.2"))},
	}
}
