//go:build linux

package datapath

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// withIsolators is withOrigins with the endpoint isolated by policies:
// egress and ingress name the policies of each direction.
func withIsolators(origins map[policy.RuleKey]policy.RuleOrigin, ingress, egress []string) *policy.Desired {
	d := withOrigins(origins)
	ep := *d.Endpoints[podIf]
	ep.Isolators = [2][]string{policyapi.Ingress: ingress, policyapi.Egress: egress}
	d.Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
	return d
}

// verdictsOf returns PolicyVerdicts by "namespace/name direction".
func verdictsOf(t *testing.T, d *Datapath) map[string]PolicyVerdict {
	t.Helper()
	vs, err := d.PolicyVerdicts()
	if err != nil {
		t.Fatalf("PolicyVerdicts: %v", err)
	}
	out := make(map[string]PolicyVerdict, len(vs))
	for _, v := range vs {
		out[v.Namespace+"/"+v.Name+" "+v.Dir.String()] = v
	}
	return out
}

// TestPrivilegedPolicyVerdictCounts checks, with no monitor connected
// (no events emitted), that a rule's counter counts the one new
// connection it allowed and not the established packets after it, that
// default deny counts a drop for every policy isolating the direction,
// and that a deleted policy's counts are gone after the Apply that
// deletes it while the others' go on.
func TestPrivilegedPolicyVerdictCounts(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	eg := policyapi.Egress
	web := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 0}
	block := policy.RuleOrigin{Namespace: "team", Name: "out", Dir: eg, Index: 0}
	origins := map[policy.RuleKey]policy.RuleOrigin{
		{Peer: idWeb, Dir: eg, Proto: policyapi.ProtoTCP}:  web,
		{Peer: class1, Dir: eg, Proto: policyapi.ProtoTCP}: block,
	}
	mustApply(t, d, withIsolators(origins, []string{"team/web"}, []string{"team/out", "team/web"}))

	tcp := policyapi.ProtoTCP
	syn := packet{src: podV4, dst: "10.0.0.2", proto: tcp, sport: 1001, dport: 80}
	if act := run(t, d.fromPod, syn); act != actOK {
		t.Fatalf("SYN to 10.0.0.2:80: %s, want OK", actName(act))
	}
	ack := syn
	ack.tcpFlags = 0x10
	reply := packet{src: "10.0.0.2", dst: podV4, proto: tcp, sport: 80, dport: 1001, tcpFlags: 0x12}
	for range 3 {
		if act := run(t, d.fromPod, ack); act != actOK {
			t.Fatalf("established packet: %s, want OK", actName(act))
		}
		if act := run(t, d.toPod, reply); act != actOK {
			t.Fatalf("established reply: %s, want OK", actName(act))
		}
	}
	denied := packet{src: podV4, dst: "10.0.0.3", proto: tcp, sport: 1002, dport: 81}
	for range 2 {
		if act := run(t, d.fromPod, denied); act != actShot {
			t.Fatalf("SYN to 10.0.0.3:81: %s, want SHOT", actName(act))
		}
	}
	if act := run(t, d.toPod, packet{src: "10.0.0.3", dst: podV4, proto: tcp, sport: 1003, dport: 9999}); act != actShot {
		t.Fatalf("SYN from 10.0.0.3 to :9999: %s, want SHOT", actName(act))
	}

	type counts struct{ allowed, denied uint64 }
	check := func(t *testing.T, want map[string]counts) {
		t.Helper()
		got := verdictsOf(t, d)
		for k, w := range want {
			g, ok := got[k]
			if !ok {
				t.Errorf("%s: no counts, want allowed %d denied %d", k, w.allowed, w.denied)
				continue
			}
			if g.Allowed != w.allowed || g.Denied != w.denied {
				t.Errorf("%s: allowed %d denied %d, want %d and %d", k, g.Allowed, g.Denied, w.allowed, w.denied)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: counted, want no series", k)
			}
		}
	}
	t.Run("counted", func(t *testing.T) {
		check(t, map[string]counts{
			"team/web egress":  {allowed: 1, denied: 2},
			"team/out egress":  {allowed: 0, denied: 2},
			"team/web ingress": {allowed: 0, denied: 1},
		})
	})

	// team/out is deleted: the endpoint's egress is team/web's alone.
	delete(origins, policy.RuleKey{Peer: class1, Dir: eg, Proto: tcp})
	if got := d.Isolators(loIfindex, 1); !slices.Equal(got, []string{"team/out", "team/web"}) {
		t.Errorf("Isolators of the egress before the delete: %q, want team/out and team/web", got)
	}
	mustApply(t, d, withIsolators(origins, []string{"team/web"}, []string{"team/web"}))
	// Monitors name a default-deny drop by the isolators of the state
	// applied last.
	for dir, want := range [][]string{{"team/web"}, {"team/web"}} {
		if got := d.Isolators(loIfindex, uint8(dir)); !slices.Equal(got, want) {
			t.Errorf("Isolators(%d) after the delete: %q, want %q", dir, got, want)
		}
	}
	denied.sport = 1004
	if act := run(t, d.fromPod, denied); act != actShot {
		t.Fatalf("SYN to 10.0.0.3:81 after the update: %s, want SHOT", actName(act))
	}
	syn.sport = 1005
	if act := run(t, d.fromPod, syn); act != actOK {
		t.Fatalf("second SYN to 10.0.0.2:80: %s, want OK", actName(act))
	}
	t.Run("after delete", func(t *testing.T) {
		check(t, map[string]counts{
			"team/web egress":  {allowed: 2, denied: 3},
			"team/web ingress": {allowed: 0, denied: 1},
		})
	})

	// The endpoint goes: its policies have no pod here and no series.
	mustApply(t, d, &policy.Desired{Addrs: scenario(true, true).Addrs, CIDRs: scenario(true, true).CIDRs})
	t.Run("endpoint gone", func(t *testing.T) {
		check(t, map[string]counts{})
	})
	if n, err := countEntries(d); err != nil || n != 0 {
		t.Errorf("lockstep_denied holds %d slots (%v) after its endpoint went, want 0", n, err)
	}
}

func countEntries(d *Datapath) (int, error) {
	var key uint32
	var perCPU []uint64
	n := 0
	it := d.denied.Iterate()
	for it.Next(&key, &perCPU) {
		n++
	}
	return n, it.Err()
}

// TestPrivilegedRuleIDsExhausted checks that an Apply needing a rule id
// when none is left still applies, its rule enforced with id 0 (events
// name no rule, the datapath says the ids ran out and counts it), and
// that once the id is free again (no map of either parity holds it) a
// later Apply names the rule.
func TestPrivilegedRuleIDsExhausted(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	eg := policyapi.Egress
	tcp := policyapi.ProtoTCP
	webKey := policy.RuleKey{Peer: idWeb, Dir: eg, Proto: tcp}
	outKey := policy.RuleKey{Peer: class1, Dir: eg, Proto: tcp}
	web := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 0}
	out := policy.RuleOrigin{Namespace: "team", Name: "out", Dir: eg}
	origins := map[policy.RuleKey]policy.RuleOrigin{webKey: web}
	mustApply(t, d, withIsolators(origins, nil, []string{"team/web"}))
	d.rules.max = 1
	gen := d.Generation()

	more := maps.Clone(origins)
	more[outKey] = out
	mustApply(t, d, withIsolators(more, nil, []string{"team/out", "team/web"}))
	if d.Generation() == gen {
		t.Fatalf("generation %d after the Apply past the ids, want it flipped", gen)
	}
	if !d.RuleIDsExhausted() || d.RuleIDsExhaustedTotal() == 0 {
		t.Errorf("RuleIDsExhausted %v, total %d; want true and counted", d.RuleIDsExhausted(), d.RuleIDsExhaustedTotal())
	}
	// While nothing frees an id, the same state applied again writes no
	// rule (the unnamed map is not rewritten at every Apply) and counts
	// no more rules without an id.
	total := d.RuleIDsExhaustedTotal()
	for i := range 3 {
		mustApply(t, d, withIsolators(more, nil, []string{"team/out", "team/web"}))
		if i > 0 && d.stats.entries > 1 { // the generation only
			t.Errorf("apply %d of the same state while ids are exhausted wrote %d entries, want the generation only", i, d.stats.entries)
		}
	}
	if got := d.RuleIDsExhaustedTotal(); got != total {
		t.Errorf("rules without an id %d after the same state again, want %d (each counted once)", got, total)
	}
	rd, err := d.Events()
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	t.Cleanup(func() { rd.Close() })
	toOut := packet{src: podV4, dst: "192.168.7.7", proto: tcp, sport: 1001, dport: 443}
	if act := run(t, d.fromPod, toOut); act != actOK {
		t.Fatalf("SYN allowed by the unnamed rule: %s, want OK", actName(act))
	}
	if ev := readEvent(t, rd); ev.Verdict != bpfmaps.VerdictAllow || ev.Rule != 0 {
		t.Errorf("event of the unnamed rule: verdict %d rule %d, want allow, rule 0", ev.Verdict, ev.Rule)
	}

	// team/web goes: its id is free once both parities moved on, and
	// the Apply after that names team/out.
	only := map[policy.RuleKey]policy.RuleOrigin{outKey: out}
	for range 3 {
		mustApply(t, d, withIsolators(only, nil, []string{"team/out"}))
	}
	if d.RuleIDsExhausted() {
		t.Errorf("RuleIDsExhausted after the id was reclaimed and the rule named, want false")
	}
	toOut.sport = 1002
	if act := run(t, d.fromPod, toOut); act != actOK {
		t.Fatalf("SYN allowed by the named rule: %s, want OK", actName(act))
	}
	ev := readEvent(t, rd)
	if o, ok := d.RuleOrigin(ev.Rule); !ok || o != out {
		t.Errorf("event after the id was freed: rule %d names %v (known %v), want %v", ev.Rule, o, ok, out)
	}
}

// TestPrivilegedRuleIDsReused checks that a rule id no map holds any more
// goes to a new rule, whose events it then names, and that the count of
// the rule that held it stays its policy's: the policy's allowed count
// does not go down.
func TestPrivilegedRuleIDsReused(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.rules.max = 2
	eg := policyapi.Egress
	tcp := policyapi.ProtoTCP
	webKey := policy.RuleKey{Peer: idWeb, Dir: eg, Proto: tcp}
	cidrKey := policy.RuleKey{Peer: class1, Dir: eg, Proto: tcp}
	web0 := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 0}
	web1 := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 1}
	fresh := policy.RuleOrigin{Namespace: "other", Name: "fresh", Dir: eg, Index: 0}
	mustApply(t, d, withIsolators(map[policy.RuleKey]policy.RuleOrigin{webKey: web0, cidrKey: web1}, nil, []string{"team/web"}))
	toCIDR := packet{src: podV4, dst: "192.168.7.7", proto: tcp, sport: 1001, dport: 443}
	for range 2 {
		if act := run(t, d.fromPod, toCIDR); act != actOK {
			t.Fatalf("SYN allowed by team/web egress[1]: %s, want OK", actName(act))
		}
		toCIDR.sport++
	}
	oldID := d.rules.ids[web1]
	if got := verdictsOf(t, d)["team/web egress"].Allowed; got != 2 {
		t.Fatalf("team/web egress allowed %d before the reuse, want 2", got)
	}

	// team/web loses rule 1 (the key stays, of no rule); twice, so that
	// neither parity holds its id.
	for range 2 {
		mustApply(t, d, withIsolators(map[policy.RuleKey]policy.RuleOrigin{webKey: web0}, nil, []string{"team/web"}))
	}
	mustApply(t, d, withIsolators(map[policy.RuleKey]policy.RuleOrigin{webKey: web0, cidrKey: fresh}, nil, []string{"other/fresh", "team/web"}))
	if id := d.rules.ids[fresh]; id != oldID {
		t.Fatalf("other/fresh got id %d, want the freed %d", id, oldID)
	}
	rd, err := d.Events()
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	t.Cleanup(func() { rd.Close() })
	if act := run(t, d.fromPod, toCIDR); act != actOK {
		t.Fatalf("SYN allowed by other/fresh: %s, want OK", actName(act))
	}
	ev := readEvent(t, rd)
	if o, ok := d.RuleOrigin(ev.Rule); !ok || o != fresh {
		t.Errorf("event after the reuse: rule %d names %v (known %v), want %v", ev.Rule, o, ok, fresh)
	}
	got := verdictsOf(t, d)
	if w := got["team/web egress"].Allowed; w != 2 {
		t.Errorf("team/web egress allowed %d after its id went to another rule, want 2 (kept)", w)
	}
	if f := got["other/fresh egress"].Allowed; f != 1 {
		t.Errorf("other/fresh egress allowed %d, want 1 (the reused slot starts at 0)", f)
	}
}

// BenchmarkPrivilegedPolicyVerdicts is one scrape of the per-policy verdict
// counts (lockstep_policy_verdicts_total) on a node of 110 endpoints (the
// kubelet's default pod limit), each isolated both ways by 5 of 1000
// policies with 10 named rules each: 50 rule ids per endpoint, every
// endpoint with default-deny drops in both directions. PolicyVerdicts
// holds the datapath lock throughout, so an Apply (a pod ADD's, a policy
// edit's) that comes during a scrape waits this long.
func BenchmarkPrivilegedPolicyVerdicts(b *testing.B) {
	testenv.Privileged(b)
	const endpoints, policiesPer, rulesPer, policies = 110, 5, 10, 1000
	d := newTestDatapath(b)
	want := benchDesired(0)
	want.Endpoints = make(map[string]*policy.EndpointPolicy, endpoints)
	for k := range endpoints {
		name := fmt.Sprintf("lsbench%d", k)
		d.fakeAttach(name, 1000+k)
		ep := &policy.EndpointPolicy{IngressIsolated: true, EgressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{}, Origins: map[policy.RuleKey]*policy.RuleOrigin{}}
		for p := range policiesPer {
			pol := fmt.Sprintf("p%d", (k*policiesPer+p)%policies)
			ep.Isolators[policyapi.Ingress] = append(ep.Isolators[policyapi.Ingress], "team/"+pol)
			ep.Isolators[policyapi.Egress] = append(ep.Isolators[policyapi.Egress], "team/"+pol)
			for r := range rulesPer {
				key := policy.RuleKey{Peer: policyapi.FirstPodIdentity + policyapi.Peer(k*policiesPer*rulesPer+p*rulesPer+r), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}
				ep.Rules[key] = ports(80, 80)
				ep.Origins[key] = &policy.RuleOrigin{Namespace: "team", Name: pol, Dir: policyapi.Ingress, Index: r}
			}
		}
		want.Endpoints[name] = ep
	}
	mustApply(b, d, want)
	perCPU := make([]uint64, ebpf.MustPossibleCPU())
	for i := range perCPU {
		perCPU[i] = 1
	}
	for k := range endpoints {
		for dir := range 2 {
			if err := d.denied.Put(bpfmaps.DeniedKey(uint32(1000+k), uint8(dir)), perCPU); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		vs, err := d.PolicyVerdicts()
		if err != nil {
			b.Fatal(err)
		}
		if len(vs) == 0 {
			b.Fatal("no verdict counts")
		}
	}
}

// TestPrivilegedRuleAllowedBatches reads the allowed counts of ids on both
// sides of the batch boundaries, with the highest id in the first batch,
// at its last slot, one past it and further on, and checks each count and
// that no read fell back to one lookup per id.
func TestPrivilegedRuleAllowedBatches(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	cpus := ebpf.MustPossibleCPU()
	ids := []uint32{1, 2, 1022, 1023, 1024, 1025, 2047, 2048, 3000, bpfmaps.MaxRuleIDs - 1}
	for _, id := range ids {
		perCPU := make([]uint64, cpus)
		for c := range perCPU {
			perCPU[c] = uint64(id)*10 + uint64(c)
		}
		if err := d.ruleAllowed.Put(id, perCPU); err != nil {
			t.Fatal(err)
		}
	}
	want := func(id uint32) uint64 {
		var n uint64
		for c := range cpus {
			n += uint64(id)*10 + uint64(c)
		}
		return n
	}
	for _, highest := range []uint32{2, 1023, 1024, 1025, 3000, bpfmaps.MaxRuleIDs - 1} {
		t.Run(fmt.Sprint("up to ", highest), func(t *testing.T) {
			var asked []uint32
			for _, id := range ids {
				if id <= highest {
					asked = append(asked, id)
				}
			}
			d.mu.Lock()
			got, err := d.ruleAllowedCounts(asked)
			fallbacks := d.verdictBatchFallbacks
			d.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if fallbacks != 0 {
				t.Errorf("%d reads fell back to one lookup per id", fallbacks)
			}
			if len(got) != len(asked) {
				t.Errorf("%d counts, want %d", len(got), len(asked))
			}
			for _, id := range asked {
				if got[id] != want(id) {
					t.Errorf("id %d: %d, want %d", id, got[id], want(id))
				}
			}
		})
	}
}
