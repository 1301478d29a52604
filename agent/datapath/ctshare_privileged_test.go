//go:build linux

package datapath

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// twoEndpoints makes a netns holding a second device (a veth, both ends
// in it) beside its loopback,
// so that test runs inside it (node.Do) can be packets of two endpoints:
// podIf at the loopback (loIfindex, runRaw) and other at the device
// (runAtIfindex). It returns the netns and the device's ifindex.
func twoEndpoints(tb testing.TB) (ns.NetNS, uint32) {
	tb.Helper()
	node, err := nodesim.Create(nodesim.Name("lsdp"))
	if err != nil {
		tb.Fatalf("create netns: %v", err)
	}
	tb.Cleanup(func() {
		if err := nodesim.Delete(node); err != nil {
			tb.Errorf("delete netns: %v", err)
		}
	})
	var idx int
	err = node.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lsdp-b"}, PeerName: "lsdp-bp"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, err := netlink.LinkByName("lsdp-b")
		if err != nil {
			return err
		}
		idx = l.Attrs().Index
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		tb.Fatalf("add a device to the netns: %v", err)
	}
	return node, uint32(idx)
}

// runAtIfindex runs prog on raw, a frame the node forwarded, as seen on
// the device ifindex of the current netns.
func runAtIfindex(tb testing.TB, prog *ebpf.Program, raw []byte, ifindex uint32) uint32 {
	tb.Helper()
	ret, err := prog.Run(&ebpf.RunOptions{Data: raw, Context: skbContext{IngressIfindex: forwardedIfindex, Ifindex: ifindex}})
	if err != nil {
		tb.Fatalf("run %s at ifindex %d: %v", prog, ifindex, err)
	}
	return ret
}

// The other endpoint of the share tests: its host interface and address.
const otherIf, otherV4 = "lsdp-b", "10.0.0.9"

// shareSetup makes a datapath with two endpoints, podIf and otherIf (whose
// ifindex it returns with the node's namespace), both applied, with an
// empty conntrack table, pinned to one CPU and a fresh reclaimer
// heartbeat.
func shareSetup(t *testing.T) (*Datapath, ns.NetNS, uint32) {
	t.Helper()
	d := newTestDatapath(t)
	node, otherIdx := twoEndpoints(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach(otherIf, int(otherIdx))
	s := scenario(false, false)
	s.Addrs[addr(otherV4)] = policy.AddrEntry{Identity: 401, CIDRClass: policyapi.NoCIDRClass}
	s.Endpoints[otherIf] = &policy.EndpointPolicy{IPv4: addr(otherV4)}
	mustApply(t, d, s)
	d.flushCT(t)
	onOneCPU(t)
	reclaimerRan(t, d)
	return d, node, otherIdx
}

// One endpoint's burst of new connections cannot flush the conntrack
// entries of another: it passes its share while the node's tables have
// room, and once the node's entries reach the pressure threshold it is
// refused, and counted; the reclaimer gives it back what expired.
func TestPrivilegedConntrackShare(t *testing.T) {
	testenv.Privileged(t)
	d, node, otherIdx := shareSetup(t)

	// The other endpoint's idle connections.
	const idle = 64
	err := node.Do(func(ns.NetNS) error {
		for i := range idle {
			raw := frame(packet{src: otherV4, dst: "10.0.0.2", proto: policyapi.ProtoUDP, sport: uint16(2000 + i), dport: 53})
			if got := runAtIfindex(t, d.fromPod, raw, otherIdx); got != actOK {
				t.Fatalf("the other endpoint's flow %d: got %s, want OK", i, actName(got))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A burst of short flows, more than the table holds.
	flood := bpfmaps.CTCapacity + 8192
	raw := frame(packet{src: podV4, dst: "10.0.0.2", proto: policyapi.ProtoUDP, sport: 1, dport: 53})
	const dstOff, sportOff = 14 + 16, 14 + 20
	before := counter(t, d, bpfmaps.ReasonCTShare)
	var passed, dropped int
	err = node.Do(func(ns.NetNS) error {
		for i := range flood {
			raw[dstOff+3] = byte(10 + i/60000)
			binary.BigEndian.PutUint16(raw[sportOff:], uint16(1024+i%60000))
			switch runRaw(t, d.fromPod, raw) {
			case actOK:
				passed++
			default:
				dropped++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The other endpoint's idle entries count towards the node's.
	if want := bpfmaps.CTPressure - idle; passed != want || dropped != flood-want {
		t.Errorf("burst of %d new flows: %d passed, %d dropped; want %d passed (up to the pressure threshold)", flood, passed, dropped, want)
	}
	if got := counter(t, d, bpfmaps.ReasonCTShare) - before; got != uint64(dropped) {
		t.Errorf("conntrack-share grew by %d, want %d", got, dropped)
	}
	// The node's own connection to the pod (a kubelet probe) is never
	// refused.
	probe := packet{src: "10.0.0.3", dst: podV4, proto: policyapi.ProtoTCP, sport: 5555, dport: 8080, fromNode: true}
	if got := run(t, d.toPod, probe); got != actOK {
		t.Errorf("the node's probe to the pod at its share: got %s, want OK", actName(got))
	}
	if got := countCT(t, d, otherIdx); got != idle {
		t.Errorf("the other endpoint holds %d of its %d idle entries after the burst", got, idle)
	}
	shares, err := d.ConntrackShares()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shares[podIf], (ConntrackShare{Entries: uint64(passed) + 1, Refused: uint64(dropped)}); got != want {
		t.Errorf("%s's share: %+v, want %+v", podIf, got, want)
	}
	if got, want := shares[otherIf], (ConntrackShare{Entries: idle}); got != want {
		t.Errorf("%s's share: %+v, want %+v", otherIf, got, want)
	}

	// The burst's entries expire: the reclaimer deletes them and the
	// endpoint opens connections again; the other's entries stay.
	ageCT(t, d, loIfindex)
	n, err := d.reclaimConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if n != passed+1 {
		t.Errorf("reclaimer deleted %d entries, want the %d expired", n, passed+1)
	}
	if shares, err = d.ConntrackShares(); err != nil {
		t.Fatal(err)
	}
	if got := shares[podIf].Entries; got != 0 {
		t.Errorf("%s holds %d entries after the reclaim, want 0", podIf, got)
	}
	if got := shares[otherIf].Entries; got != idle {
		t.Errorf("%s holds %d entries after the reclaim, want %d", otherIf, got, idle)
	}
	if got := run(t, d.fromPod, packet{src: podV4, dst: "10.0.0.3", proto: policyapi.ProtoUDP, sport: 7, dport: 53}); got != actOK {
		t.Errorf("a new flow after the reclaim: got %s, want OK", actName(got))
	}
}

// underPressure makes the node's estimate of the entries it holds the
// pressure threshold, as that many entries the programs admitted would:
// the next new connection of an endpoint beyond its share is refused.
// The reclaimer's next run brings the estimate back to the entries held.
func underPressure(tb testing.TB, d *Datapath) {
	tb.Helper()
	var released uint64
	if err := d.ctReleased.Lookup(bpfmaps.CTNodeKey, &released); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		tb.Fatal(err)
	}
	if err := d.ctShare.Put(bpfmaps.CTNodeKey, bpfmaps.CTShare{Created: released + bpfmaps.CTPressure}); err != nil {
		tb.Fatalf("put the node under pressure: %v", err)
	}
}

// reclaimerRan runs the reclaimer once, as the agent does every 10 s: the
// programs enforce the shares only while it runs.
func reclaimerRan(tb testing.TB, d *Datapath) {
	tb.Helper()
	if _, err := d.reclaimConntrack(); err != nil {
		tb.Fatalf("reclaim: %v", err)
	}
}

// newFlows sends n new UDP flows from one address to another through
// prog, each from its own source port, and returns how many passed. The
// peer's address (the destination of the pod's flows through d.fromPod,
// the source of those towards it) changes every 60000 flows.
func newFlows(tb testing.TB, d *Datapath, prog *ebpf.Program, from, to string, n int) (passed int) {
	tb.Helper()
	raw := frame(packet{src: from, dst: to, proto: policyapi.ProtoUDP, sport: 1, dport: 53})
	const srcOff, dstOff, sportOff = 14 + 12, 14 + 16, 14 + 20
	peerOff := srcOff
	if prog == d.fromPod {
		peerOff = dstOff
	}
	for i := range n {
		raw[peerOff+3] = byte(100 + i/60000)
		binary.BigEndian.PutUint16(raw[sportOff:], uint16(1024+i%60000))
		if runRaw(tb, prog, raw) == actOK {
			passed++
		}
	}
	return passed
}

// What others open towards a pod spends only the share of connections
// towards it: a flood of new flows to a pod can fill that share when the
// node is under pressure, and the pod still opens its own connections
// (its DNS lookups) from its other.
func TestPrivilegedConntrackShareDirections(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	d.flushCT(t)
	onOneCPU(t)
	reclaimerRan(t, d)
	underPressure(t, d)

	flood := bpfmaps.CTShareLimit + 100
	if got := newFlows(t, d, d.toPod, "10.0.0.2", podV4, flood); got != bpfmaps.CTShareLimit {
		t.Errorf("a flood of %d new flows towards the pod: %d passed, want %d (the share)", flood, got, bpfmaps.CTShareLimit)
	}
	if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", 100); got != 100 {
		t.Errorf("the pod's own new flows after a flood towards it: %d of 100 passed", got)
	}
	shares, err := d.ConntrackShares()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shares[podIf], (ConntrackShare{Entries: bpfmaps.CTShareLimit + 100, Refused: 100}); got != want {
		t.Errorf("%s's shares: %+v, want %+v", podIf, got, want)
	}
}

// Without a reclaimer (the agent down), nothing releases what a pod's
// connections held: the programs then refuse nothing, even under
// pressure, rather than cut a busy pod off until the agent is back.
func TestPrivilegedConntrackShareNeedsReclaimer(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	for _, tc := range []struct {
		name string
		beat func() // what the reclaimer left at bpfmaps.CTReclaimKey
	}{
		{"never ran", func() {}},
		{"last ran a minute ago", func() {
			if err := d.ctReleased.Put(bpfmaps.CTReclaimKey, coarseNow(t)-60e9); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			onOneCPU(t)
			tc.beat()
			underPressure(t, d)
			flood := bpfmaps.CTShareLimit + 100
			if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", flood); got != flood {
				t.Errorf("%d new flows with no reclaimer running: %d passed, want all", flood, got)
			}
		})
	}
	// Once it runs again, the share holds.
	d.flushCT(t)
	reclaimerRan(t, d)
	underPressure(t, d)
	flood := bpfmaps.CTShareLimit + 100
	if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", flood); got != bpfmaps.CTShareLimit {
		t.Errorf("%d new flows with the reclaimer running: %d passed, want %d", flood, got, bpfmaps.CTShareLimit)
	}
}

// countCT counts the lockstep_ct entries at ifindex.
func countCT(tb testing.TB, d *Datapath, ifindex uint32) int {
	tb.Helper()
	var k bpfmaps.CTKey
	var v bpfmaps.CTEntry
	n := 0
	it := d.ct.Iterate()
	for it.Next(&k, &v) {
		if k.Ifindex == ifindex {
			n++
		}
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// ageCT makes every lockstep_ct entry at ifindex expired a minute ago.
func ageCT(tb testing.TB, d *Datapath, ifindex uint32) {
	tb.Helper()
	var keys []bpfmaps.CTKey
	var k bpfmaps.CTKey
	var v bpfmaps.CTEntry
	it := d.ct.Iterate()
	for it.Next(&k, &v) {
		if k.Ifindex == ifindex {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	past := coarseNow(tb) - 60e9
	for _, k := range keys {
		if err := d.ct.Update(k, bpfmaps.CTEntry{Expires: past, Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0)}, ebpf.UpdateExist); err != nil {
			tb.Fatal(err)
		}
	}
}
