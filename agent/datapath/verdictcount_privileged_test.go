//go:build linux

package datapath

import (
	"errors"
	"maps"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
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
	mustApply(t, d, withIsolators(origins, []string{"team/web"}, []string{"team/web"}))
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
// when none is left fails with ErrRuleIDs before the flip (the enforced
// state stays as it was), while one that needs no new id still applies.
func TestPrivilegedRuleIDsExhausted(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	eg := policyapi.Egress
	web := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 0}
	origins := map[policy.RuleKey]policy.RuleOrigin{{Peer: idWeb, Dir: eg, Proto: policyapi.ProtoTCP}: web}
	mustApply(t, d, withIsolators(origins, nil, []string{"team/web"}))
	d.rules.max = 1
	gen := d.Generation()

	more := maps.Clone(origins)
	more[policy.RuleKey{Peer: class1, Dir: eg, Proto: policyapi.ProtoTCP}] = policy.RuleOrigin{Namespace: "team", Name: "out", Dir: eg}
	err := d.Apply(withIsolators(more, nil, []string{"team/out", "team/web"}))
	if !errors.Is(err, ErrRuleIDs) {
		t.Fatalf("Apply with a rule past the ids: %v, want ErrRuleIDs", err)
	}
	if d.Generation() != gen {
		t.Errorf("generation %d after the refused Apply, want %d", d.Generation(), gen)
	}
	mustApply(t, d, withIsolators(origins, nil, []string{"team/web"}))
}
