//go:build linux

package datapath

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// liveView is what packets see in the live parity, decoded into policy
// terms. Rules holds only endpoints with at least one rule: an empty inner
// map and none deny alike.
type liveView struct {
	Addrs     map[netip.Addr]policy.AddrEntry
	CIDRs     map[netip.Prefix]policyapi.Peer // canonical 16-byte prefixes
	Flags     map[uint32]uint8
	Rules     map[uint32]map[policy.RuleKey][]policy.PortRange
	OuterOnly []uint32 // outer entries of ifindexes without an endpoint
}

// readView reads the live parity of d's maps.
func readView(t *testing.T, d *Datapath) liveView {
	t.Helper()
	v := liveView{Addrs: map[netip.Addr]policy.AddrEntry{}, CIDRs: map[netip.Prefix]policyapi.Peer{}, Flags: map[uint32]uint8{}, Rules: map[uint32]map[policy.RuleKey][]policy.PortRange{}}
	var st bpfmaps.State
	if err := d.state.Lookup(uint32(0), &st); err != nil {
		t.Fatalf("read state: %v", err)
	}
	p := st.Gen & 1
	var a bpfmaps.Addr
	var iv bpfmaps.IPCacheValue
	for it := d.ipcache.Iterate(); it.Next(&a, &iv); {
		v.Addrs[a.Netip()] = policy.AddrEntry{Identity: policyapi.Peer(iv.Identity[p]), CIDRClass: policyapi.Peer(iv.CIDRClass[p])}
	}
	var ck bpfmaps.CIDRKey
	var cv bpfmaps.CIDRValue
	for it := d.cidrs.Iterate(); it.Next(&ck, &cv); {
		v.CIDRs[netip.PrefixFrom(netip.AddrFrom16(ck.Addr), int(ck.PrefixLen))] = policyapi.Peer(cv.CIDRClass[p])
	}
	var idx uint32
	var info bpfmaps.EndpointInfo
	for it := d.endpoints.Iterate(); it.Next(&idx, &info); {
		v.Flags[idx] = info.Flags[p]
	}
	keys, err := outerKeys(d.policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := v.Flags[k.Ifindex]; !ok {
			v.OuterOnly = append(v.OuterOnly, k.Ifindex)
		}
		if k.Parity != p {
			continue
		}
		if rules := readRules(t, d, k.Ifindex, int(p)); len(rules) > 0 {
			v.Rules[k.Ifindex] = rules
		}
	}
	return v
}

// readRules decodes the inner map lockstep_policy holds for {ifindex,
// parity}, nil when there is none.
func readRules(t *testing.T, d *Datapath, ifindex uint32, parity int) map[policy.RuleKey][]policy.PortRange {
	t.Helper()
	var inner *ebpf.Map
	if err := d.policy.Lookup(bpfmaps.PolicyOuterKey{Ifindex: ifindex, Parity: uint32(parity)}, &inner); err != nil {
		return nil
	}
	defer inner.Close()
	rules := map[policy.RuleKey][]policy.PortRange{}
	var k bpfmaps.PolicyKey
	var pv bpfmaps.PolicyValue
	for it := inner.Iterate(); it.Next(&k, &pv); {
		var rs []policy.PortRange
		for _, r := range pv.Ranges[:pv.NRanges] {
			rs = append(rs, policy.PortRange{Lo: r.Lo, Hi: r.Hi})
		}
		rules[policy.RuleKey{Peer: policyapi.Peer(k.Peer), Dir: policyapi.Direction(k.Dir), Proto: k.Proto}] = rs
	}
	return rules
}

// wantView is the liveView that applying want must produce.
func wantView(want *policy.Desired, ifindexes map[string]uint32) liveView {
	v := liveView{Addrs: map[netip.Addr]policy.AddrEntry{}, CIDRs: map[netip.Prefix]policyapi.Peer{}, Flags: map[uint32]uint8{}, Rules: map[uint32]map[policy.RuleKey][]policy.PortRange{}}
	for a, e := range want.Addrs {
		v.Addrs[a.Unmap()] = e
	}
	for pfx, c := range want.CIDRs {
		v.CIDRs[canonPrefix(pfx)] = c
	}
	for name, ep := range want.Endpoints {
		idx := ifindexes[name]
		v.Flags[idx] = flagsOf(ep)
		if len(ep.Rules) > 0 {
			v.Rules[idx] = ep.Rules
		}
	}
	return v
}

// checkUntouched fails unless what packets see in the live parity of got,
// read while the next state is written but not flipped, is prev for every
// entry prev has; entries new to got must behave as if absent.
func checkUntouched(t *testing.T, step int, prev, got liveView) {
	t.Helper()
	for a, e := range prev.Addrs {
		if g := got.Addrs[a]; g != e {
			t.Errorf("step %d, before the flip: address %s reads %+v, want %+v", step, a, g, e)
		}
	}
	for a, g := range got.Addrs {
		if _, ok := prev.Addrs[a]; !ok && g.Identity != policyapi.PeerWorld {
			t.Errorf("step %d, before the flip: new address %s reads identity %d, want world", step, a, g.Identity)
		}
	}
	for pfx, c := range prev.CIDRs {
		if g, ok := got.CIDRs[pfx]; !ok || g != c {
			t.Errorf("step %d, before the flip: prefix %s reads class %#x (present %v), want %#x", step, pfx, g, ok, c)
		}
	}
	for idx, f := range prev.Flags {
		if g := got.Flags[idx]; g != f {
			t.Errorf("step %d, before the flip: ifindex %d flags %d, want %d", step, idx, g, f)
		}
	}
	for idx, g := range got.Flags {
		if _, ok := prev.Flags[idx]; !ok && g != bpfmaps.IngressIsolated|bpfmaps.EgressIsolated {
			t.Errorf("step %d, before the flip: new ifindex %d flags %d, want isolated both ways", step, idx, g)
		}
	}
	for idx, rules := range got.Rules {
		if !rulesEqual(rules, prev.Rules[idx]) {
			t.Errorf("step %d, before the flip: ifindex %d rules changed:\n got %v\nwant %v", step, idx, rules, prev.Rules[idx])
		}
	}
	for idx, rules := range prev.Rules {
		if !rulesEqual(rules, got.Rules[idx]) {
			t.Errorf("step %d, before the flip: ifindex %d lost rules %v", step, idx, rules)
		}
	}
}

func rulesEqual(a, b map[policy.RuleKey][]policy.PortRange) bool {
	return maps.EqualFunc(a, b, func(x, y []policy.PortRange) bool { return slices.Equal(x, y) })
}

func viewsEqual(a, b liveView) bool {
	if !maps.Equal(a.Addrs, b.Addrs) || !maps.Equal(a.CIDRs, b.CIDRs) || !maps.Equal(a.Flags, b.Flags) || len(a.OuterOnly) > 0 || len(b.OuterOnly) > 0 {
		return false
	}
	return maps.EqualFunc(a.Rules, b.Rules, rulesEqual)
}

// checkMirror fails unless every inner map the mirror says holds some
// endpoint policy's rules (src) does, in both parities: the claim that
// lets Apply and the settler write only differences.
func checkMirror(t *testing.T, step int, d *Datapath) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.mirror.eps {
		for parity := range 2 {
			ep := e.src[parity]
			if ep == nil {
				continue
			}
			got := readRules(t, d, e.ifindex, parity)
			if !rulesEqual(got, ep.Rules) && !(len(got) == 0 && len(ep.Rules) == 0) {
				t.Errorf("step %d: ifindex %d parity %d holds %d rules, the mirror says %d", step, e.ifindex, parity, len(got), len(ep.Rules))
			}
		}
	}
}

// editWorld makes random edits to a Desired the way successive results of
// policy.Incremental differ: unchanged maps and endpoint policies are the
// same objects, changed ones are new.
type editWorld struct {
	rng   *rand.Rand
	names []string
}

func (w *editWorld) addr() netip.Addr {
	i := w.rng.IntN(60)
	if i%3 == 0 {
		return netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(i)})
	}
	return netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})
}

var editPrefixes = []netip.Prefix{
	prefix("10.0.0.0/8"), prefix("10.9.0.0/16"), prefix("10.9.0.0/28"), prefix("10.9.0.8/30"),
	prefix("172.16.0.0/12"), prefix("fd00::/8"), prefix("fd00::/120"), prefix("192.168.1.0/24"),
}

func (w *editWorld) peer() policyapi.Peer {
	switch w.rng.IntN(6) {
	case 0:
		return policyapi.PeerAny
	case 1:
		return policyapi.PeerWorld
	case 2:
		return policyapi.CIDRClassBit | policyapi.Peer(1+w.rng.IntN(4))
	}
	return policyapi.FirstPodIdentity + policyapi.Peer(w.rng.IntN(200))
}

func (w *editWorld) ranges() []policy.PortRange {
	var out []policy.PortRange
	lo := uint16(1 + w.rng.IntN(100))
	for range 1 + w.rng.IntN(3) {
		hi := lo + uint16(w.rng.IntN(50))
		out = append(out, policy.PortRange{Lo: lo, Hi: hi})
		lo = hi + 2 + uint16(w.rng.IntN(100))
	}
	return out
}

func (w *editWorld) ruleKey() policy.RuleKey {
	protos := []uint8{policyapi.ProtoOther, policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP}
	return policy.RuleKey{Peer: w.peer(), Dir: policyapi.Direction(w.rng.IntN(2)), Proto: protos[w.rng.IntN(len(protos))]}
}

// editRulesOf returns a changed copy of rules: keys added, removed or
// given other ports, occasionally many at once (past an inner map's
// capacity) or none left.
func (w *editWorld) editRulesOf(rules map[policy.RuleKey][]policy.PortRange) map[policy.RuleKey][]policy.PortRange {
	out := maps.Clone(rules)
	if out == nil {
		out = map[policy.RuleKey][]policy.PortRange{}
	}
	switch w.rng.IntN(10) {
	case 0:
		return map[policy.RuleKey][]policy.PortRange{}
	case 1:
		for range 20 + w.rng.IntN(60) {
			out[w.ruleKey()] = w.ranges()
		}
		return out
	}
	for range 1 + w.rng.IntN(3) {
		keys := slices.Collect(maps.Keys(out))
		switch {
		case len(keys) > 0 && w.rng.IntN(3) == 0:
			delete(out, keys[w.rng.IntN(len(keys))])
		case len(keys) > 0 && w.rng.IntN(2) == 0:
			out[keys[w.rng.IntN(len(keys))]] = w.ranges()
		default:
			out[w.ruleKey()] = w.ranges()
		}
	}
	return out
}

func (w *editWorld) edit(cur *policy.Desired) *policy.Desired {
	next := *cur
	for range 1 + w.rng.IntN(3) {
		switch w.rng.IntN(10) {
		case 0, 1:
			if sameMap(next.Addrs, cur.Addrs) {
				next.Addrs = maps.Clone(cur.Addrs)
			}
			a := w.addr()
			if _, ok := next.Addrs[a]; ok && w.rng.IntN(2) == 0 {
				delete(next.Addrs, a)
			} else {
				next.Addrs[a] = policy.AddrEntry{Identity: policyapi.FirstPodIdentity + policyapi.Peer(w.rng.IntN(200)), CIDRClass: policyapi.CIDRClassBit | policyapi.Peer(w.rng.IntN(4))}
			}
		case 2:
			if sameMap(next.CIDRs, cur.CIDRs) {
				next.CIDRs = maps.Clone(cur.CIDRs)
			}
			pfx := editPrefixes[w.rng.IntN(len(editPrefixes))]
			if _, ok := next.CIDRs[pfx]; ok {
				delete(next.CIDRs, pfx)
			} else {
				next.CIDRs[pfx] = policyapi.CIDRClassBit | policyapi.Peer(1+w.rng.IntN(4))
			}
		case 3:
			if sameMap(next.Endpoints, cur.Endpoints) {
				next.Endpoints = maps.Clone(cur.Endpoints)
			}
			name := w.names[w.rng.IntN(len(w.names))]
			if _, ok := next.Endpoints[name]; ok {
				delete(next.Endpoints, name)
			} else {
				next.Endpoints[name] = &policy.EndpointPolicy{IngressIsolated: true, Rules: w.editRulesOf(nil)}
			}
		default:
			if len(next.Endpoints) == 0 {
				continue
			}
			if sameMap(next.Endpoints, cur.Endpoints) {
				next.Endpoints = maps.Clone(cur.Endpoints)
			}
			names := slices.Sorted(maps.Keys(next.Endpoints))
			name := names[w.rng.IntN(len(names))]
			ep := *next.Endpoints[name]
			if w.rng.IntN(5) == 0 {
				ep.IngressIsolated, ep.EgressIsolated = w.rng.IntN(2) == 0, w.rng.IntN(2) == 0
			} else {
				ep.Rules = w.editRulesOf(ep.Rules)
			}
			next.Endpoints[name] = &ep
		}
	}
	if w.rng.IntN(10) == 0 {
		// A full recompilation: equal content, every object new.
		next.Addrs, next.CIDRs = maps.Clone(next.Addrs), maps.Clone(next.CIDRs)
		eps := make(map[string]*policy.EndpointPolicy, len(next.Endpoints))
		for name, ep := range next.Endpoints {
			c := *ep
			c.Rules = maps.Clone(ep.Rules)
			eps[name] = &c
		}
		next.Endpoints = eps
	}
	return &next
}

// Random edits, and returns to earlier states, each applied
// incrementally: before every flip the live
// parity still says exactly the previous state, after it exactly the new
// one, and what the mirror believes each inner map holds is what it
// holds, whether or not the settler got to run between edits. At the end
// the maps say what a fresh Datapath's apply of the last state says.
func TestPrivilegedApplyRandomEditsMatchFresh(t *testing.T) {
	testenv.Privileged(t)
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := &editWorld{rng: rand.New(rand.NewPCG(seed, 0x5eed)), names: []string{"ep-a", "ep-b", "ep-c", "ep-d"}}
			d := newTestDatapath(t)
			ifindexes := map[string]uint32{}
			for i, name := range w.names {
				ifindexes[name] = uint32(3000 + i)
				d.fakeAttach(name, 3000+i)
			}
			cur := &policy.Desired{
				Addrs:     map[netip.Addr]policy.AddrEntry{},
				CIDRs:     map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
				Endpoints: map[string]*policy.EndpointPolicy{},
			}
			mustApply(t, d, cur)
			prev := readView(t, d)
			step := 0
			d.beforeFlip = func() { checkUntouched(t, step, prev, readView(t, d)) }
			history := []*policy.Desired{cur}
			for step = 1; step <= 150; step++ {
				if w.rng.IntN(8) == 0 {
					// Any Desired may come back, its maps the very objects
					// of an earlier Apply.
					cur = history[w.rng.IntN(len(history))]
				} else {
					cur = w.edit(cur)
				}
				history = append(history, cur)
				mustApply(t, d, cur)
				got := readView(t, d)
				if want := wantView(cur, ifindexes); !viewsEqual(got, want) {
					t.Fatalf("step %d: live parity differs from the state applied:\n got %+v\nwant %+v", step, got, want)
				}
				if w.rng.IntN(2) == 0 {
					d.waitSettled(t)
				}
				checkMirror(t, step, d)
				prev = got
				if t.Failed() {
					t.FailNow()
				}
			}
			d.beforeFlip = nil

			fresh := newTestDatapath(t)
			for name, idx := range ifindexes {
				fresh.fakeAttach(name, int(idx))
			}
			mustApply(t, fresh, cur)
			if got, want := readView(t, d), readView(t, fresh); !viewsEqual(got, want) {
				t.Errorf("after %d edits, incremental differs from fresh:\n got %+v\nwant %+v", step-1, got, want)
			}
		})
	}
}

// A one-rule change on a node with 10k addresses and 1k rules, handed over
// as the incremental compiler does, writes that rule and the generation:
// no address walk, no new inner map, no outer map update (each of which
// waits for an RCU grace period). Once the settler has run, the other
// parity holds the rule too and the next edit again writes only its own.
func TestPrivilegedApplyOneRuleChangeIsBounded(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	base := benchDesired(1000)
	mustApply(t, d, base)
	mustApply(t, d, base)
	d.waitSettled(t)

	cur := base
	for i, tc := range []struct {
		name    string
		settle  bool
		maxRule int // inner map entries
	}{
		{"first edit", true, 1},
		{"after the settler ran", true, 1},
		{"back to back", false, 2}, // may also bring the previous edit's parity up to date
		{"back to back again", true, 2},
	} {
		next := *cur
		ep := *cur.Endpoints[podIf]
		ep.Rules = maps.Clone(ep.Rules)
		ep.Rules[policy.RuleKey{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}] = ports(uint16(100+i), uint16(100+i))
		next.Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
		cur = &next
		mustApply(t, d, cur)
		st := d.stats
		if st.outer != 0 || st.innerMaps != 0 || st.entries > tc.maxRule+1 {
			t.Errorf("%s: wrote %+v, want at most %d rule entries and the generation, no inner map, no outer update", tc.name, st, tc.maxRule)
		}
		if tc.settle {
			d.waitSettled(t)
		}
	}
	checkMirror(t, 0, d)
	if got := readRules(t, d, loIfindex, int(d.Generation()&1)); !rulesEqual(got, cur.Endpoints[podIf].Rules) {
		t.Errorf("live rules differ from the last state: %d rules, want %d", len(got), len(cur.Endpoints[podIf].Rules))
	}
}

// The outer map changes only when an endpoint appears, leaves or outgrows
// its inner maps, and then in one batch per Apply.
func TestPrivilegedApplyOuterWrites(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach("ep-a", 4001)
	d.fakeAttach("ep-b", 4002)
	rules := func(n int) map[policy.RuleKey][]policy.PortRange {
		r := map[policy.RuleKey][]policy.PortRange{}
		for i := range n {
			r[policy.RuleKey{Peer: policyapi.FirstPodIdentity + policyapi.Peer(i), Proto: policyapi.ProtoTCP}] = ports(80, 80)
		}
		return r
	}
	st := func(eps map[string]*policy.EndpointPolicy) *policy.Desired {
		return &policy.Desired{CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass}, Endpoints: eps}
	}
	a := &policy.EndpointPolicy{IngressIsolated: true, Rules: rules(3)}
	b := &policy.EndpointPolicy{IngressIsolated: true, Rules: rules(5)}
	aGrown := &policy.EndpointPolicy{IngressIsolated: true, Rules: rules(100)}
	steps := []struct {
		name             string
		want             *policy.Desired
		outer, innerMaps int
	}{
		{"two new endpoints: both parities of each, one batch", st(map[string]*policy.EndpointPolicy{"ep-a": a, "ep-b": b}), 4, 4},
		{"unchanged", st(map[string]*policy.EndpointPolicy{"ep-a": a, "ep-b": b}), 0, 0},
		{"rules outgrow the inner map", st(map[string]*policy.EndpointPolicy{"ep-a": aGrown, "ep-b": b}), 1, 1},
		{"the other parity outgrows it too", st(map[string]*policy.EndpointPolicy{"ep-a": aGrown, "ep-b": b}), 1, 1},
		{"an endpoint leaves", st(map[string]*policy.EndpointPolicy{"ep-a": aGrown}), 2, 0},
		{"no rules left: emptied in place", st(map[string]*policy.EndpointPolicy{"ep-a": {IngressIsolated: true}}), 0, 0},
	}
	for _, s := range steps {
		mustApply(t, d, s.want)
		if d.stats.outer != s.outer || d.stats.innerMaps != s.innerMaps {
			t.Errorf("%s: %d outer writes and %d inner maps, want %d and %d", s.name, d.stats.outer, d.stats.innerMaps, s.outer, s.innerMaps)
		}
	}
	if got := readView(t, d); len(got.Rules) != 0 || len(got.OuterOnly) != 0 {
		t.Errorf("live rules %v, outer entries without endpoint %v: want none", got.Rules, got.OuterOnly)
	}
}
