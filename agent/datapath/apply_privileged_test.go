//go:build linux

package datapath

import (
	"errors"
	"maps"
	"reflect"
	"testing"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// stateB changes everything stateA has: a rule's ports, an address's
// identity, a new address, a removed address, a new ipBlock, a removed
// ipBlock, a removed endpoint and a new one.
func stateA() *policy.Desired {
	d := scenario(true, true)
	d.Endpoints["gone-in-b"] = &policy.EndpointPolicy{
		IPv4: addr("10.0.0.50"), IngressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{{Peer: idWeb, Proto: policyapi.ProtoTCP}: ports(1, 2)},
	}
	d.Addrs[addr("10.0.0.50")] = policy.AddrEntry{Identity: 500, CIDRClass: policyapi.NoCIDRClass}
	return d
}

func stateB() *policy.Desired {
	d := stateA()
	ep := *d.Endpoints[podIf]
	ep.Rules = maps.Clone(ep.Rules)
	ep.Rules[policy.RuleKey{Peer: idWeb, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(81, 81)
	ep.Rules[policy.RuleKey{Peer: idOther, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(82, 82)
	ep.Rules[policy.RuleKey{Peer: policyapi.CIDRClassBit | 5, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(443, 443)
	d.Endpoints[podIf] = &ep
	d.Addrs[addr("10.0.0.2")] = policy.AddrEntry{Identity: idOther, CIDRClass: policyapi.NoCIDRClass}
	d.Addrs[addr("10.0.0.7")] = policy.AddrEntry{Identity: idWeb, CIDRClass: policyapi.NoCIDRClass}
	delete(d.Addrs, addr("10.0.0.3"))
	d.CIDRs[prefix("172.16.0.0/12")] = policyapi.CIDRClassBit | 5
	delete(d.CIDRs, prefix("192.168.1.0/24"))
	delete(d.Endpoints, "gone-in-b")
	delete(d.Addrs, addr("10.0.0.50"))
	d.Endpoints["new-in-b"] = &policy.EndpointPolicy{IPv6: addr("fd00::60"), EgressIsolated: true}
	d.Addrs[addr("fd00::60")] = policy.AddrEntry{Identity: 600, CIDRClass: policyapi.NoCIDRClass}
	return d
}

// flipCases are verdicts that differ between stateA and stateB.
func flipCases() []struct {
	name      string
	pkt       packet
	wantA, wB uint32
} {
	tcp := policyapi.ProtoTCP
	out := func(dst string, dport uint16) packet {
		return packet{src: podV4, dst: dst, proto: tcp, sport: 40000, dport: dport}
	}
	return []struct {
		name      string
		pkt       packet
		wantA, wB uint32
	}{
		{"rule ports changed: old port", out("10.0.0.2", 80), actOK, actShot},
		{"rule ports changed: new port", out("10.0.0.3", 82), actShot, actShot}, // 10.0.0.3 is world in B
		{"identity of address changed", out("10.0.0.2", 82), actShot, actOK},
		{"new address is a pod in B only", out("10.0.0.7", 81), actShot, actOK},
		{"new address is world in A", out("10.0.0.7", 8443), actOK, actShot},
		{"removed address becomes world", out("10.0.0.3", 8443), actShot, actOK},
		{"new ipBlock", out("172.16.3.3", 443), actShot, actOK},
		{"removed /24 falls back to /16", out("192.168.1.5", 443), actShot, actOK},
		{"removed /24 takes its class", out("192.168.1.5", 22), actOK, actShot},
	}
}

// The race the double buffer exists for: while the new parity is being
// written, packets still see the complete old state; after the flip, the
// complete new one.
func TestPrivilegedApplyGenFlipIsAtomic(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", 1000001)
	d.fakeAttach("new-in-b", 1000002)
	mustApply(t, d, stateA())

	check := func(phase string, b bool) {
		for _, tc := range flipCases() {
			d.flushCT(t)
			want := tc.wantA
			if b {
				want = tc.wB
			}
			if got := run(t, d.fromPod, tc.pkt); got != want {
				t.Errorf("%s: %s: got %s, want %s", phase, tc.name, actName(got), actName(want))
			}
		}
	}
	check("A applied", false)
	genBefore := d.Generation()
	hooked := false
	d.beforeFlip = func() {
		hooked = true
		check("B written, not flipped", false)
	}
	mustApply(t, d, stateB())
	d.beforeFlip = nil
	if !hooked {
		t.Fatal("beforeFlip hook did not run")
	}
	if got := d.Generation(); got != genBefore+1 {
		t.Errorf("generation %d after one Apply from %d", got, genBefore)
	}
	check("B applied", true)
}

// snapshot is what the live parity of the maps says, entry by entry.
type snapshot struct {
	Gen       uint32
	IPCache   map[bpfmaps.Addr][2]uint32
	CIDRs     map[bpfmaps.CIDRKey]uint32
	Endpoints map[uint32]bpfmaps.EndpointInfo
	Policy    map[uint32][]bpfmaps.PolicyRule // live parity only
	// OuterIfindexes are the endpoints with an outer entry of either
	// parity: never one the endpoints map lacks.
	OuterIfindexes map[uint32]bool
}

func takeSnapshot(t *testing.T, d *Datapath) snapshot {
	t.Helper()
	s := snapshot{
		IPCache:   map[bpfmaps.Addr][2]uint32{},
		CIDRs:     map[bpfmaps.CIDRKey]uint32{},
		Endpoints: map[uint32]bpfmaps.EndpointInfo{},
		Policy:    map[uint32][]bpfmaps.PolicyRule{},

		OuterIfindexes: map[uint32]bool{},
	}
	dump := func(name string) []bpfmaps.Entry {
		es, err := bpfmaps.Dump(d.pinRoot, name)
		if err != nil {
			t.Fatalf("Dump %s: %v", name, err)
		}
		return es
	}
	s.Gen = dump(bpfmaps.StateMap)[0].Value.(bpfmaps.State).Gen
	p := s.Gen & 1
	for _, e := range dump(bpfmaps.IPCacheMap) {
		v := e.Value.(bpfmaps.IPCacheValue)
		s.IPCache[e.Key.(bpfmaps.Addr)] = [2]uint32{v.Identity[p], v.CIDRClass[p]}
	}
	for _, e := range dump(bpfmaps.CIDRsMap) {
		s.CIDRs[e.Key.(bpfmaps.CIDRKey)] = e.Value.(bpfmaps.CIDRValue).CIDRClass[p]
	}
	for _, e := range dump(bpfmaps.EndpointsMap) {
		v := e.Value.(bpfmaps.EndpointInfo)
		v.Flags = [2]uint8{v.Flags[p], 0}
		s.Endpoints[e.Key.(uint32)] = v
	}
	for _, e := range dump(bpfmaps.PolicyMap) {
		k := e.Key.(bpfmaps.PolicyOuterKey)
		s.OuterIfindexes[k.Ifindex] = true
		if k.Parity != p {
			continue
		}
		rules := e.Value.(bpfmaps.PolicyEntries).Rules
		sortRules(rules)
		s.Policy[k.Ifindex] = rules
	}
	return s
}

// Apply A, then B, then A again: the maps must say what a fresh Apply of A
// says, with nothing left over from B.
func TestPrivilegedApplyIncrementalMatchesFresh(t *testing.T) {
	testenv.Privileged(t)
	inc := newTestDatapath(t)
	fresh := newTestDatapath(t)
	for _, d := range []*Datapath{inc, fresh} {
		d.fakeAttach(podIf, loIfindex)
		d.fakeAttach("gone-in-b", 1000001)
		d.fakeAttach("new-in-b", 1000002)
	}
	mustApply(t, inc, stateA())
	mustApply(t, inc, stateB())
	mustApply(t, inc, stateA())
	mustApply(t, fresh, stateA())
	mustApply(t, fresh, stateA()) // same parity as inc (gen 3 vs 2): apply twice more
	mustApply(t, fresh, stateA())

	got, want := takeSnapshot(t, inc), takeSnapshot(t, fresh)
	if got.Gen != 3 || want.Gen != 3 {
		t.Fatalf("generations %d and %d, want 3", got.Gen, want.Gen)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("A→B→A differs from A:\n got %+v\nwant %+v", got, want)
	}
	if _, ok := got.Endpoints[1000002]; ok {
		t.Error("endpoint new-in-b left in lockstep_endpoints")
	}
	for idx := range got.OuterIfindexes {
		if _, ok := got.Endpoints[idx]; !ok {
			t.Errorf("outer policy entry for ifindex %d, which has no endpoint", idx)
		}
	}
	for _, tc := range flipCases() {
		for _, d := range []*Datapath{inc, fresh} {
			d.flushCT(t)
			if v := run(t, d.fromPod, tc.pkt); v != tc.wantA {
				t.Errorf("%s: got %s, want %s", tc.name, actName(v), actName(tc.wantA))
			}
		}
	}
	checkVerdicts(t, inc, isolatedCases())
}

// Applying the same state again writes nothing but the generation, both
// for the very same Desired and for an equal one built anew (what a full
// recompilation hands over).
func TestPrivilegedApplyUnchangedTouchesNothing(t *testing.T) {
	testenv.Privileged(t)
	for _, tc := range []struct {
		name  string
		again func(*policy.Desired) *policy.Desired
	}{
		{"same objects", func(d *policy.Desired) *policy.Desired { return d }},
		{"equal copies", func(*policy.Desired) *policy.Desired { return scenario(true, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDatapath(t)
			d.fakeAttach(podIf, loIfindex)
			want := scenario(true, true)
			mustApply(t, d, want)
			mustApply(t, d, want) // fills the other parity
			inner := d.mirror.names[podIf].inner
			if inner[0] == nil || inner[0] == inner[1] {
				t.Errorf("inner maps %p and %p: want one of its own per parity", inner[0], inner[1])
			}
			before := takeSnapshot(t, d)
			mustApply(t, d, tc.again(want))
			if got := d.stats; got != (applyStats{entries: 1}) {
				t.Errorf("re-applying wrote %+v, want only the generation", got)
			}
			after := takeSnapshot(t, d)
			before.Gen, after.Gen = 0, 0
			if !reflect.DeepEqual(before, after) {
				t.Errorf("re-applying changed the maps:\n%+v\n%+v", before, after)
			}
			if got := d.mirror.names[podIf].inner; got != inner {
				t.Errorf("re-applying replaced the inner maps")
			}
		})
	}
}

func TestPrivilegedApplyNotAttached(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	err := d.Apply(scenario(true, true))
	if !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Apply with an endpoint never attached: %v, want ErrNotAttached", err)
	}
	if d.Generation() != 0 {
		t.Errorf("a refused Apply flipped the generation to %d", d.Generation())
	}
}

// A new agent adopts the pinned state: the first Apply after Load removes
// what the previous agent applied and the new state lacks.
func TestPrivilegedApplyAdoptsPinnedState(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", 1000001)
	d.fakeAttach("new-in-b", 1000002)
	mustApply(t, d, stateA())
	d.Close()

	d2, err := Load(Options{PinRoot: d.pinRoot})
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer d2.Close()
	d2.fakeAttach(podIf, loIfindex)
	d2.fakeAttach("new-in-b", 1000002)
	if d2.Generation() != 1 {
		t.Errorf("adopted generation %d, want 1", d2.Generation())
	}
	mustApply(t, d2, stateB())
	mustApply(t, d2, stateB())
	s := takeSnapshot(t, d2)
	if _, ok := s.Endpoints[1000001]; ok {
		t.Error("endpoint of the previous agent not removed")
	}
	if _, ok := s.IPCache[bpfmaps.AddrFrom(addr("10.0.0.3"))]; ok {
		t.Error("address of the previous agent not removed")
	}
	if want := map[uint32]bool{loIfindex: true}; !reflect.DeepEqual(s.OuterIfindexes, want) {
		t.Errorf("outer policy entries for ifindexes %v, want %v (new-in-b has no rules)", s.OuterIfindexes, want)
	}
	for _, tc := range flipCases() {
		d2.flushCT(t)
		if v := run(t, d2.fromPod, tc.pkt); v != tc.wB {
			t.Errorf("%s: got %s, want %s", tc.name, actName(v), actName(tc.wB))
		}
	}
}

// The periodic resync finds Invalidate through this interface.
var _ enforcer.Invalidator = (*Datapath)(nil)

// TestPrivilegedInvalidateRepairsDrift changes the maps behind the
// Datapath's back (an address removed, a stray address added, a rule of
// the live rules map removed): Apply alone trusts what it wrote and leaves
// the drift, Invalidate then Apply repair all of it, in both parities.
func TestPrivilegedInvalidateRepairsDrift(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", 1000001)
	want := stateA()
	mustApply(t, d, want)
	d.waitQuiet(t)
	mustApply(t, d, want) // both parities written
	clean := takeSnapshot(t, d)

	removed, stray := bpfmaps.AddrFrom(addr("10.0.0.3")), bpfmaps.AddrFrom(addr("10.9.9.9"))
	if _, ok := clean.IPCache[removed]; !ok {
		t.Fatalf("stateA has no ipcache entry for %v", removed)
	}
	if err := d.ipcache.Delete(removed); err != nil {
		t.Fatal(err)
	}
	if err := d.ipcache.Put(stray, bpfmaps.IPCacheValue{Identity: [2]uint32{77, 77}}); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	live := d.mirror.names[podIf].inner[d.mirror.gen&1]
	d.mu.Unlock()
	var k bpfmaps.PolicyKey
	if err := live.m.NextKey(nil, &k); err != nil {
		t.Fatalf("first rule of the live rules map: %v", err)
	}
	if err := live.m.Delete(k); err != nil {
		t.Fatal(err)
	}
	drifted := takeSnapshot(t, d)
	if reflect.DeepEqual(clean, drifted) {
		t.Fatal("the drift did not show in the snapshot")
	}

	for range 2 {
		d.waitQuiet(t)
		mustApply(t, d, want)
	}
	if got := takeSnapshot(t, d); reflect.DeepEqual(clean.IPCache, got.IPCache) {
		t.Fatal("Apply without Invalidate repaired the ipcache; this test no longer shows what Invalidate adds")
	}

	d.Invalidate()
	for range 2 { // the first Apply repairs one parity, the second the other
		d.waitQuiet(t)
		mustApply(t, d, want)
		got := takeSnapshot(t, d)
		got.Gen = clean.Gen
		if !reflect.DeepEqual(clean, got) {
			t.Fatalf("after Invalidate and Apply the maps still differ from a clean Apply:\nclean %+v\ngot   %+v", clean, got)
		}
	}
}
