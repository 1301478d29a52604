//go:build linux

package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// svcParity is what one parity of the Service maps holds for a frontend:
// its backends in slot order, its affinity timeout in seconds and its
// mark.
type svcParity struct {
	Backends []policy.ServiceBackend
	Affinity uint32
	Mark     uint32
}

// readServices reads what parity of lockstep_services and
// lockstep_backends holds, by frontend; a frontend absent from that
// parity is left out. Backend slots of no frontend, and slots beyond a
// frontend's count, fail the test.
func readServices(t *testing.T, d *Datapath, parity int) map[policy.ServiceFrontend]svcParity {
	t.Helper()
	byID := map[uint32]policy.ServiceFrontend{}
	counts := map[uint32]int{}
	out := map[policy.ServiceFrontend]svcParity{}
	var k bpfmaps.SvcKey
	var v bpfmaps.SvcValue
	for it := d.services.Iterate(); it.Next(&k, &v); {
		fe := policy.ServiceFrontend{Addr: k.Addr.Netip(), Port: k.Port, Proto: k.Proto}
		byID[v.ID] = fe
		if v.Count[parity] == bpfmaps.SvcAbsent {
			continue
		}
		counts[v.ID] = int(v.Count[parity])
		out[fe] = svcParity{Backends: make([]policy.ServiceBackend, v.Count[parity]), Affinity: v.Affinity[parity], Mark: v.Mark[parity]}
	}
	var bk bpfmaps.BackendKey
	var bv bpfmaps.BackendValue
	for it := d.backends.Iterate(); it.Next(&bk, &bv); {
		fe, ok := byID[bk.ID]
		if !ok {
			t.Errorf("backend slot %+v of no frontend", bk)
			continue
		}
		if int(bk.Parity) != parity {
			continue
		}
		if int(bk.Slot) >= counts[bk.ID] {
			t.Errorf("backend slot %d of %v in parity %d, beyond its count %d", bk.Slot, fe, parity, counts[bk.ID])
			continue
		}
		out[fe].Backends[bk.Slot] = policy.ServiceBackend{Addr: bv.Addr.Netip(), Port: bv.Port, Local: bv.Flags&bpfmaps.BackendLocal != 0}
	}
	return out
}

// sortedView is view with each frontend's backends sorted, to compare
// with a Desired (slots keep their place across changes, so the order in
// the map is not the Desired's).
func sortedView(view map[policy.ServiceFrontend]svcParity) map[policy.ServiceFrontend]svcParity {
	out := make(map[policy.ServiceFrontend]svcParity, len(view))
	for fe, p := range view {
		bs := slices.Clone(p.Backends)
		slices.SortFunc(bs, func(a, b policy.ServiceBackend) int {
			return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
		})
		out[fe] = svcParity{Backends: bs, Affinity: p.Affinity, Mark: p.Mark}
	}
	return out
}

// wantServiceView is what the maps should hold for svcs.
func wantServiceView(svcs map[policy.ServiceFrontend]*policy.ServiceEntry) map[policy.ServiceFrontend]svcParity {
	out := make(map[policy.ServiceFrontend]svcParity, len(svcs))
	for fe, se := range svcs {
		p := svcParity{Backends: slices.Clone(se.Backends), Affinity: affinitySeconds(se.AffinityTimeout)}
		if p.Backends == nil {
			p.Backends = []policy.ServiceBackend{}
		}
		if se.External {
			p.Mark = DefaultMasqueradeMark
		}
		out[fe] = p
	}
	return sortedView(out)
}

// viewDiff describes the first frontend where got and want differ.
func viewDiff(got, want map[policy.ServiceFrontend]svcParity) string {
	for fe, w := range want {
		if g, ok := got[fe]; !ok || !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("%v holds %+v, want %+v", fe, g, w)
		}
	}
	for fe, g := range got {
		if _, ok := want[fe]; !ok {
			return fmt.Sprintf("%v holds %+v, want none", fe, g)
		}
	}
	return "no difference"
}

// manyServices is n TCP frontends 10.97.i.j:80, each with per backends
// 10.1.i.j+k:8080 (k < per), built anew at every call; every third is
// external (policy.ServiceEntry.External).
func manyServices(n, per int) map[policy.ServiceFrontend]*policy.ServiceEntry {
	out := make(map[policy.ServiceFrontend]*policy.ServiceEntry, n)
	for i := range n {
		fe := policy.ServiceFrontend{Addr: netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}), Port: 80, Proto: policyapi.ProtoTCP}
		se := &policy.ServiceEntry{Service: fmt.Sprintf("ns/svc%d", i), External: i%3 == 0}
		for k := range per {
			// An external frontend's first backend is a pod of the node.
			local := se.External && k == 0
			se.Backends = append(se.Backends, policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 6), byte(i<<2 + k)}), Port: 8080, Local: local})
		}
		out[fe] = se
	}
	return out
}

func checkLive(t *testing.T, d *Datapath, what string, svcs map[policy.ServiceFrontend]*policy.ServiceEntry) {
	t.Helper()
	live := int(d.Generation() & 1)
	if got, want := sortedView(readServices(t, d, live)), wantServiceView(svcs); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the live parity differs: %s", what, viewDiff(got, want))
	}
}

// Apply writes only the Service entries that change: nothing for the same
// state, object for object or built anew; one slot for one backend
// replaced; a removed frontend's entries go once the settler caught up.
// Both parities end up the same.
func TestPrivilegedServiceApplyIncremental(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	s1 := &policy.Desired{Services: manyServices(300, 3)}
	mustApply(t, d, s1)
	checkLive(t, d, "first apply", s1.Services)
	if d.stats.svc != 300*(3+1) {
		t.Errorf("first apply wrote %d Service entries, want %d (every frontend and slot)", d.stats.svc, 300*4)
	}

	d.waitSettled(t)
	mustApply(t, d, s1)
	if d.stats.svc != 0 {
		t.Errorf("the same state again wrote %d Service entries, want 0", d.stats.svc)
	}

	s2 := &policy.Desired{Services: cloneServices(s1.Services)}
	fe := policy.ServiceFrontend{Addr: addr("10.97.0.7"), Port: 80, Proto: policyapi.ProtoTCP}
	changed := *s1.Services[fe]
	changed.Backends = slices.Clone(changed.Backends)
	changed.Backends[1].Addr = addr("10.2.0.1")
	s2.Services[fe] = &changed
	d.waitSettled(t)
	mustApply(t, d, s2)
	checkLive(t, d, "one backend replaced", s2.Services)
	if d.stats.svc != 1 {
		t.Errorf("one backend replaced: %d Service entries written, want 1 (its slot)", d.stats.svc)
	}

	s3 := &policy.Desired{Services: manyServices(300, 3)}
	s3.Services[fe] = &policy.ServiceEntry{Service: changed.Service, Backends: slices.Clone(changed.Backends)}
	d.waitSettled(t)
	mustApply(t, d, s3)
	if d.stats.svc != 0 {
		t.Errorf("the same state built anew: %d Service entries written, want 0", d.stats.svc)
	}

	s4 := &policy.Desired{Services: cloneServices(s3.Services)}
	for i := range 10 {
		delete(s4.Services, policy.ServiceFrontend{Addr: netip.AddrFrom4([4]byte{10, 97, 0, byte(100 + i)}), Port: 80, Proto: policyapi.ProtoTCP})
	}
	d.waitSettled(t)
	mustApply(t, d, s4)
	checkLive(t, d, "ten frontends removed", s4.Services)
	d.waitSettled(t)
	for parity := range 2 {
		if got, want := sortedView(readServices(t, d, parity)), wantServiceView(s4.Services); !reflect.DeepEqual(got, want) {
			t.Errorf("settled parity %d differs: %s", parity, viewDiff(got, want))
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st[bpfmaps.ServicesMap] != 290 || st[bpfmaps.BackendsMap] != 2*290*3 {
		t.Errorf("settled maps hold %d frontends and %d backend slots, want 290 and %d (both parities)", st[bpfmaps.ServicesMap], st[bpfmaps.BackendsMap], 2*290*3)
	}

	mustApply(t, d, &policy.Desired{})
	d.waitSettled(t)
	st, err = d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st[bpfmaps.ServicesMap] != 0 || st[bpfmaps.BackendsMap] != 0 {
		t.Errorf("no Service left, yet the maps hold %d frontends and %d backend slots", st[bpfmaps.ServicesMap], st[bpfmaps.BackendsMap])
	}
}

// Results that say which frontends changed (Desired.ServicesBase, as
// policy.Incremental gives them) are applied by looking at those alone,
// and leave the maps as a full write would: random changes to TCP, SCTP
// (translated, or left to kube-proxy when a backend's port differs) and
// IPv6 frontends (some with IPv4 backends, which are ignored), with and
// without the settler in between, results the datapath never saw (it
// then writes every frontend), results without a base, and a change the
// maps cannot hold, refused whole and undone. Settled, the maps hold no
// entry of a frontend that went.
func TestPrivilegedServiceApplyChanges(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	rng := rand.New(rand.NewPCG(1, 2))
	// Frontend i: SCTP for every tenth, IPv6 for every seventh, else TCP.
	frontend := func(i int) policy.ServiceFrontend {
		fe := policy.ServiceFrontend{Addr: netip.AddrFrom4([4]byte{10, 97, 0, byte(i)}), Port: 80, Proto: policyapi.ProtoTCP}
		switch {
		case i%10 == 0:
			fe.Proto = policyapi.ProtoSCTP
		case i%7 == 0:
			fe.Addr = netip.AddrFrom16([16]byte{0xfd, 0, 0x97, 15: byte(i)})
		}
		return fe
	}
	entry := func(i, backends int) *policy.ServiceEntry {
		fe := frontend(i)
		se := &policy.ServiceEntry{Service: fmt.Sprintf("ns/svc%d", i)}
		for range backends {
			b := policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i), byte(rng.IntN(8))}), Port: 8080}
			if fe.Addr.Is6() && rng.IntN(4) > 0 {
				b.Addr = netip.AddrFrom16([16]byte{0xfd, 1, byte(i), 15: byte(rng.IntN(8))})
			}
			if fe.Proto == policyapi.ProtoSCTP && rng.IntN(3) > 0 {
				b.Port = fe.Port
			}
			se.Backends = append(se.Backends, b)
		}
		slices.SortFunc(se.Backends, func(a, b policy.ServiceBackend) int {
			return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
		})
		se.Backends = slices.Compact(se.Backends)
		return se
	}
	// translated is what the maps hold of svcs: SCTP frontends with a
	// backend on another port are kube-proxy's, and only backends of the
	// frontend's family count.
	translated := func(svcs map[policy.ServiceFrontend]*policy.ServiceEntry) map[policy.ServiceFrontend]*policy.ServiceEntry {
		out := map[policy.ServiceFrontend]*policy.ServiceEntry{}
		for fe, se := range svcs {
			var bs []policy.ServiceBackend
			left := false
			for _, b := range se.Backends {
				left = left || (fe.Proto == policyapi.ProtoSCTP && b.Port != fe.Port)
				if b.Addr.Is4() == fe.Addr.Is4() {
					bs = append(bs, b)
				}
			}
			if !left {
				out[fe] = &policy.ServiceEntry{Service: se.Service, Backends: bs}
			}
		}
		return out
	}
	check := func(what string, svcs map[policy.ServiceFrontend]*policy.ServiceEntry, settled bool) {
		t.Helper()
		want := translated(svcs)
		checkLive(t, d, what, want)
		if !settled {
			return
		}
		d.waitSettled(t)
		backends := 0
		for _, se := range want {
			backends += len(se.Backends)
		}
		for parity := range 2 {
			if got, w := sortedView(readServices(t, d, parity)), wantServiceView(want); !reflect.DeepEqual(got, w) {
				t.Errorf("%s: settled parity %d differs: %s", what, parity, viewDiff(got, w))
			}
		}
		st, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st[bpfmaps.ServicesMap] != len(want) || st[bpfmaps.BackendsMap] != 2*backends {
			t.Errorf("%s: settled maps hold %d frontends and %d backend slots, want %d and %d (both parities)",
				what, st[bpfmaps.ServicesMap], st[bpfmaps.BackendsMap], len(want), 2*backends)
		}
	}
	// change returns base with n random frontends added, replaced or
	// removed, and the frontends it changed.
	change := func(base map[policy.ServiceFrontend]*policy.ServiceEntry, n int) (map[policy.ServiceFrontend]*policy.ServiceEntry, []policy.ServiceFrontend) {
		next := cloneServices(base)
		var changed []policy.ServiceFrontend
		for range n {
			i := rng.IntN(60)
			fe := frontend(i)
			if slices.Contains(changed, fe) {
				continue
			}
			if _, ok := next[fe]; ok && rng.IntN(3) == 0 {
				delete(next, fe)
			} else {
				next[fe] = entry(i, rng.IntN(5))
			}
			changed = append(changed, fe)
		}
		return next, changed
	}

	cur := map[policy.ServiceFrontend]*policy.ServiceEntry{}
	for i := range 50 {
		cur[frontend(i)] = entry(i, 2)
	}
	mustApply(t, d, &policy.Desired{Services: cur})
	steps, looked, incremental := 400, 0, 0
	refused := false
	for step := range steps {
		next, changed := change(cur, 1+rng.IntN(4))
		want := &policy.Desired{Services: next, ServicesBase: cur, ServicesChanged: changed}
		if rng.IntN(12) == 0 {
			want.ServicesBase, want.ServicesChanged = nil, nil
		}
		cur = next
		if rng.IntN(12) == 0 {
			continue // a result the datapath never sees
		}
		mustApply(t, d, want)
		if d.stats.svcLooked < len(cur)/2 {
			incremental++
			looked += d.stats.svcLooked
		}
		what := fmt.Sprintf("step %d", step)
		check(what, cur, rng.IntN(2) == 0)
		if !refused && step >= steps/2 && want.ServicesBase != nil {
			refused = true
			// One frontend over its capacity: refused, nothing written
			// and nothing remembered of it. The next result is another
			// change of the last state applied, written from its
			// changes; the one after it is written whole, after the
			// periodic resync's read-back, from what the datapath
			// concluded about every frontend.
			bad := cloneServices(cur)
			fe := frontend(1 + rng.IntN(6))
			huge := &policy.ServiceEntry{Backends: make([]policy.ServiceBackend, maxBackendsPerFrontend+1)}
			for k := range huge.Backends {
				huge.Backends[k] = policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, 2, byte(k >> 8), byte(k)}), Port: 8080}
			}
			bad[fe] = huge
			gen := d.Generation()
			if err := d.Apply(&policy.Desired{Services: bad, ServicesBase: cur, ServicesChanged: []policy.ServiceFrontend{fe}}); !errors.Is(err, ErrServiceCapacity) {
				t.Fatalf("%s: a frontend over its capacity: %v, want ErrServiceCapacity", what, err)
			}
			if d.Generation() != gen {
				t.Fatalf("%s: a refused state moved the generation", what)
			}
			for _, readBack := range []bool{false, true} {
				if readBack {
					d.Invalidate()
				}
				next, changed := change(cur, 1)
				mustApply(t, d, &policy.Desired{Services: next, ServicesBase: cur, ServicesChanged: changed})
				if !readBack && d.stats.svcLooked > 2*len(changed) {
					t.Errorf("%s: the change after a refused one looked at %d frontends, want its own %d (and the last one's)", what, d.stats.svcLooked, len(changed))
				}
				cur = next
				check(fmt.Sprintf("%s, after a refused state (read back %v)", what, readBack), cur, true)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d of %d results applied by looking at the changed frontends alone (%d in all)", incremental, steps, looked)
	if !refused {
		t.Error("no state over its capacity was tried")
	}
	if incremental < steps/2 {
		t.Errorf("only %d of %d results were applied from their changes", incremental, steps)
	}
}

// Slots stay put: removing a backend moves at most the last one into its
// slot, adding one fills a free slot first.
func TestPlanSlots(t *testing.T) {
	b := func(last byte) policy.ServiceBackend {
		return policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, 0, 0, last}), Port: 80}
	}
	held := func(bs ...policy.ServiceBackend) []backendSlot {
		var out []backendSlot
		for _, x := range bs {
			out = append(out, backendSlot{b: x, state: slotHolds})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		live []backendSlot
		want []policy.ServiceBackend
		out  []policy.ServiceBackend
	}{
		{"new frontend", nil, []policy.ServiceBackend{b(1), b(2)}, []policy.ServiceBackend{b(1), b(2)}},
		{"unchanged", held(b(3), b(1), b(2)), []policy.ServiceBackend{b(1), b(2), b(3)}, []policy.ServiceBackend{b(3), b(1), b(2)}},
		{"one added", held(b(3), b(1)), []policy.ServiceBackend{b(1), b(2), b(3)}, []policy.ServiceBackend{b(3), b(1), b(2)}},
		{"one replaced", held(b(1), b(2), b(3)), []policy.ServiceBackend{b(1), b(3), b(4)}, []policy.ServiceBackend{b(1), b(4), b(3)}},
		{"first removed: last moves in", held(b(1), b(2), b(3)), []policy.ServiceBackend{b(2), b(3)}, []policy.ServiceBackend{b(3), b(2)}},
		{"last removed", held(b(1), b(2), b(3)), []policy.ServiceBackend{b(1), b(2)}, []policy.ServiceBackend{b(1), b(2)}},
		{"all but the middle removed", held(b(1), b(2), b(3)), []policy.ServiceBackend{b(2)}, []policy.ServiceBackend{b(2)}},
		{"all removed", held(b(1), b(2)), nil, []policy.ServiceBackend{}},
		{"unknown slot reused", []backendSlot{{b: b(1), state: slotUnknown}, {b: b(2), state: slotHolds}}, []policy.ServiceBackend{b(1), b(2)}, []policy.ServiceBackend{b(1), b(2)}},
	} {
		if got := planSlots(tc.live, tc.want); !slices.Equal(got, tc.out) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.out)
		}
	}
}

// A state beyond the maps' capacities is refused whole, with an error,
// and changes nothing.
func TestPrivilegedServiceCapacity(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	ok := &policy.Desired{Services: manyServices(10, 2)}
	mustApply(t, d, ok)
	gen := d.Generation()
	tooManyBackends := func(frontends, per int) map[policy.ServiceFrontend]*policy.ServiceEntry {
		out := map[policy.ServiceFrontend]*policy.ServiceEntry{}
		for i := range frontends {
			se := &policy.ServiceEntry{Backends: make([]policy.ServiceBackend, per)}
			for k := range se.Backends {
				se.Backends[k] = policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, byte(i), byte(k >> 8), byte(k)}), Port: 80}
			}
			out[policy.ServiceFrontend{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), Port: 80, Proto: policyapi.ProtoTCP}] = se
		}
		return out
	}
	for _, tc := range []struct {
		name string
		svcs map[policy.ServiceFrontend]*policy.ServiceEntry
	}{
		{"frontends", manyServices(bpfmaps.MaxFrontends+1, 0)},
		{"backends per node", tooManyBackends(3, bpfmaps.MaxBackends/3+1)},
		{"backends per frontend", tooManyBackends(1, 65535)},
	} {
		err := d.Apply(&policy.Desired{Services: tc.svcs})
		if !errors.Is(err, ErrServiceCapacity) {
			t.Errorf("too many %s: %v, want ErrServiceCapacity", tc.name, err)
		}
		if d.Generation() != gen {
			t.Errorf("too many %s: the generation moved to %d", tc.name, d.Generation())
		}
		checkLive(t, d, "after too many "+tc.name, ok.Services)
	}
}

// A new agent adopts the Service maps: the same state writes nothing, a
// backend slot of no frontend (left by an agent killed between two
// writes) goes, and frontends the new state lacks go.
func TestPrivilegedServiceAdopt(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	s := &policy.Desired{Services: manyServices(20, 2)}
	mustApply(t, d, s)
	d.waitSettled(t)
	orphan := bpfmaps.BackendKey{ID: 999999, Slot: 0}
	if err := d.backends.Put(orphan, bpfmaps.BackendValue{Addr: bpfmaps.AddrFrom(addr("10.9.9.9")), Port: 1}); err != nil {
		t.Fatal(err)
	}
	d.Close()

	d2, err := Load(Options{PinRoot: d.pinRoot})
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer d2.Close()
	mustApply(t, d2, &policy.Desired{Services: manyServices(20, 2)})
	if d2.stats.svc != 1 {
		t.Errorf("the same state after a restart wrote %d Service entries, want 1 (the orphan slot deleted)", d2.stats.svc)
	}
	var v bpfmaps.BackendValue
	if err := d2.backends.Lookup(orphan, &v); err == nil {
		t.Errorf("the backend slot of no frontend is still there")
	}
	fewer := manyServices(15, 2)
	mustApply(t, d2, &policy.Desired{Services: fewer})
	d2.waitSettled(t)
	checkLive(t, d2, "fewer frontends after a restart", fewer)
	if got := readServices(t, d2, int(d2.Generation()&1)^1); len(got) != 15 {
		t.Errorf("idle parity holds %d frontends after settling, want 15", len(got))
	}
}

// With LeaveServicesToKubeProxy an agent translates nothing: it writes no
// frontend and removes those an agent that translated left. A pod's
// packet to a ClusterIP then leaves as it came, for kube-proxy, and egress
// policy judges the ClusterIP: a policy that allows the backends does not
// allow it, one that allows the ClusterIP's range does. Started again
// without it, the agent translates again.
func TestPrivilegedServicesLeftToKubeProxy(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	want := svcBenchDesired()
	mustApply(t, d, want)
	d.waitSettled(t)
	checkLive(t, d, "translating", want.Services)
	d.Close()
	// The same, with egress to 10.0.0.0/8 (CIDR class 1, where the
	// ClusterIPs are) on TCP 80 allowed as well.
	wantRange := svcBenchDesired()
	wantRange.Endpoints[podIf].Rules[policy.RuleKey{Peer: policyapi.CIDRClassBit | 1, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}] = ports(80, 80)

	sport := uint16(3000)
	syn := func(t *testing.T, d *Datapath) (uint32, netip.AddrPort) {
		t.Helper()
		sport++
		ret, raw := runOut(t, d.fromPod, csumFrame(packet{src: podV4, dst: "10.96.0.1", proto: policyapi.ProtoTCP, sport: sport, dport: 80, tcpFlags: tcpSYN}))
		if ret != actOK {
			return ret, netip.AddrPort{}
		}
		w := mustWire(t, "SYN", raw)
		return ret, netip.AddrPortFrom(w.dst, w.dport)
	}
	frontendAP := netip.MustParseAddrPort("10.96.0.1:80")
	backendAP := netip.AddrPortFrom(benchAddr(0), 8080)
	t.Run("left to kube-proxy", func(t *testing.T) {
		d2, err := Load(Options{PinRoot: d.pinRoot, LeaveServicesToKubeProxy: true})
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		defer d2.Close()
		d2.fakeAttach(podIf, loIfindex)
		mustApply(t, d2, want)
		mustApply(t, d2, svcBenchDesired())
		if d2.stats.svc != 0 {
			t.Errorf("an apply after the first wrote %d Service entries, want 0", d2.stats.svc)
		}
		d2.waitSettled(t)
		var k bpfmaps.SvcKey
		var v bpfmaps.SvcValue
		if it := d2.services.Iterate(); it.Next(&k, &v) {
			t.Errorf("lockstep_services still holds %+v once settled", k)
		}
		if ret, to := syn(t, d2); ret != actShot {
			t.Errorf("a new connection to the frontend, the backends allowed: %s to %s, want it dropped (egress judges the ClusterIP)", actName(ret), to)
		}
		mustApply(t, d2, wantRange)
		if ret, to := syn(t, d2); ret != actOK || to != frontendAP {
			t.Errorf("a new connection to the frontend, its range allowed: %s to %s, want OK to %s", actName(ret), to, frontendAP)
		}
	})
	t.Run("translated again", func(t *testing.T) {
		d3, err := Load(Options{PinRoot: d.pinRoot})
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		defer d3.Close()
		d3.fakeAttach(podIf, loIfindex)
		mustApply(t, d3, want)
		checkLive(t, d3, "translating again", want.Services)
		if ret, to := syn(t, d3); ret != actOK || to != backendAP {
			t.Errorf("a new connection to the frontend: %s to %s, want OK to %s", actName(ret), to, backendAP)
		}
	})
}
