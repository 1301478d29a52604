//go:build linux

package datapath

import (
	"maps"
	"slices"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// withOrigins is the verdict scenario with an origin for some of its keys
// (the rest have none: they carry rule id 0) and a bucketed rule (more
// port ranges than one value holds) to identity idOther. Its ranges are
// its own, as the compiler's are for a key whose origin changed (see
// policy.Desired).
func withOrigins(origins map[policy.RuleKey]policy.RuleOrigin) *policy.Desired {
	d := scenario(true, true)
	ep := *d.Endpoints[podIf]
	ep.Rules = make(map[policy.RuleKey][]policy.PortRange, len(ep.Rules)+1)
	for k, rs := range d.Endpoints[podIf].Rules {
		ep.Rules[k] = slices.Clone(rs)
	}
	var many []policy.PortRange
	for p := uint16(1000); p < 1040; p += 2 {
		many = append(many, policy.PortRange{Lo: p, Hi: p})
	}
	ep.Rules[policy.RuleKey{Peer: idOther, Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}] = many
	ep.Origins = make(map[policy.RuleKey]*policy.RuleOrigin, len(origins))
	for k, o := range origins {
		ep.Origins[k] = &o
	}
	d.Endpoints = map[string]*policy.EndpointPolicy{podIf: &ep}
	return d
}

// TestPrivilegedVerdictEventsNameRule checks that the event of an allowed
// new connection carries the id of the rule whose entry allowed it (by
// identity, CIDR class, a protocol without ports and a bucketed rule),
// that a drop by policy carries none ("default deny"), and that after a
// policy update the new rule is named while the old id still names the
// old rule.
func TestPrivilegedVerdictEventsNameRule(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	eg := policyapi.Egress
	web := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 0}
	ping := policy.RuleOrigin{Namespace: "team", Name: "web", Dir: eg, Index: 1}
	block := policy.RuleOrigin{Namespace: "team", Name: "out", Dir: eg, Index: 0}
	bucketed := policy.RuleOrigin{Namespace: "team", Name: "many", Dir: eg, Index: 3}
	origins := map[policy.RuleKey]policy.RuleOrigin{
		{Peer: idWeb, Dir: eg, Proto: policyapi.ProtoTCP}:   web,
		{Peer: idWeb, Dir: eg, Proto: policyapi.ProtoOther}: ping,
		{Peer: class1, Dir: eg, Proto: policyapi.ProtoTCP}:  block,
		{Peer: idOther, Dir: eg, Proto: policyapi.ProtoUDP}: bucketed,
	}
	mustApply(t, d, withOrigins(origins))
	rd, err := d.Events()
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	t.Cleanup(func() { rd.Close() })
	next := func(t *testing.T, p packet) bpfmaps.Event {
		t.Helper()
		run(t, d.fromPod, p)
		rd.SetDeadline(time.Now().Add(time.Second))
		ev, err := rd.Read()
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		return ev
	}
	tcp, udp := policyapi.ProtoTCP, policyapi.ProtoUDP
	cases := []struct {
		name    string
		p       packet
		verdict uint8
		want    *policy.RuleOrigin // nil: rule 0
	}{
		{"identity", packet{src: podV4, dst: "10.0.0.2", proto: tcp, sport: 1001, dport: 80}, bpfmaps.VerdictAllow, &web},
		{"no ports", packet{src: podV4, dst: "10.0.0.2", proto: protoICMP}, bpfmaps.VerdictAllow, &ping},
		{"cidr class", packet{src: podV4, dst: "192.168.7.7", proto: tcp, sport: 1002, dport: 443}, bpfmaps.VerdictAllow, &block},
		{"bucketed", packet{src: podV4, dst: "10.0.0.3", proto: udp, sport: 1003, dport: 1038}, bpfmaps.VerdictAllow, &bucketed},
		{"no origin", packet{src: podV4, dst: "10.0.0.2", proto: udp, sport: 1004, dport: 53}, bpfmaps.VerdictAllow, nil},
		{"default deny", packet{src: podV4, dst: "10.0.0.3", proto: tcp, sport: 1005, dport: 81}, bpfmaps.VerdictDrop, nil},
		{"bucketed, port outside", packet{src: podV4, dst: "10.0.0.3", proto: udp, sport: 1006, dport: 1039}, bpfmaps.VerdictDrop, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := next(t, tc.p)
			if ev.Verdict != tc.verdict {
				t.Fatalf("verdict %d (%s), want %d", ev.Verdict, ev.Reason, tc.verdict)
			}
			o, ok := d.RuleOrigin(ev.Rule)
			switch {
			case tc.want == nil && (ev.Rule != 0 || ok):
				t.Errorf("rule %d (%v), want 0", ev.Rule, o)
			case tc.want != nil && (!ok || o != *tc.want):
				t.Errorf("rule %d names %v (known %v), want %v", ev.Rule, o, ok, *tc.want)
			}
		})
	}

	// The same key now comes from another rule: the maps say so, and the
	// old id still names the old rule for events read late.
	oldID := next(t, packet{src: podV4, dst: "10.0.0.2", proto: tcp, sport: 2001, dport: 80}).Rule
	moved := policy.RuleOrigin{Namespace: "team", Name: "a-web", Dir: eg, Index: 2}
	origins = maps.Clone(origins)
	origins[policy.RuleKey{Peer: idWeb, Dir: eg, Proto: policyapi.ProtoTCP}] = moved
	mustApply(t, d, withOrigins(origins))
	ev := next(t, packet{src: podV4, dst: "10.0.0.2", proto: tcp, sport: 2002, dport: 80})
	if o, ok := d.RuleOrigin(ev.Rule); !ok || o != moved {
		t.Errorf("after the update: rule %d names %v (known %v), want %v", ev.Rule, o, ok, moved)
	}
	if o, ok := d.RuleOrigin(oldID); !ok || o != web {
		t.Errorf("old id %d names %v (known %v), want %v", oldID, o, ok, web)
	}
}
