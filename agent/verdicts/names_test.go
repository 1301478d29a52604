package verdicts

import (
	"slices"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

type fakeNamer struct{}

func (fakeNamer) Endpoint(ifindex uint32) string {
	if ifindex == 7 {
		return "shop/web"
	}
	return ""
}

func (fakeNamer) Peer(id uint32) string {
	if id == 300 {
		return `shop/{"app":"client"}`
	}
	return ""
}

func (fakeNamer) Rule(id uint32) (policy.RuleOrigin, bool) {
	if id == 1 {
		return policy.RuleOrigin{Namespace: "shop", Name: "allow-web", Dir: policyapi.Ingress, Index: 2}, true
	}
	return policy.RuleOrigin{}, false
}

// Describe names what decided each event: the rule by policy, or the
// reason the program recorded.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		ev                           bpfmaps.Event
		endpoint, peer, rule, policy string
	}{
		{"allowed by a rule", bpfmaps.Event{Ifindex: 7, Peer: 300, Rule: 1, Reason: bpfmaps.ReasonAllowedNew},
			"shop/web", `shop/{"app":"client"}`, "shop/allow-web ingress[2]", "shop/allow-web"},
		{"default deny", bpfmaps.Event{Ifindex: 7, Peer: 2, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonPolicyIngress},
			"shop/web", "world", "default deny", ""},
		{"not isolated", bpfmaps.Event{Ifindex: 7, Reason: bpfmaps.ReasonAllowedNew}, "shop/web", "-", "not isolated", ""},
		{"anti-spoofing", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonSpoofed}, "shop/web", "-", "anti-spoofing", ""},
		{"no endpoint", bpfmaps.Event{Ifindex: 9, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonNoEndpoint}, "ifindex 9", "-", "no endpoint", ""},
		{"unknown identity", bpfmaps.Event{Ifindex: 7, Peer: 301, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonPolicyEgress},
			"shop/web", "identity 301", "default deny", ""},
		{"Service refused", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictReject, Reason: bpfmaps.ReasonServiceNoBackend}, "shop/web", "-", "service without backend", ""},
		{"Service dropped (internalTrafficPolicy Local)", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonServiceNoBackend},
			"shop/web", "-", "service without local backend", ""},
		{"conntrack share", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonCTShare}, "shop/web", "-", "conntrack share", ""},
		{"Service source port clash", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonServicePortClash},
			"shop/web", "-", "service source port clash", ""},
	} {
		v := Describe(tc.ev, fakeNamer{}, time.Unix(0, 0))
		if v.Endpoint != tc.endpoint || v.Peer != tc.peer || v.Rule != tc.rule || v.Policy != tc.policy || v.Count != 1 {
			t.Errorf("%s: got endpoint %q peer %q rule %q policy %q count %d, want %q %q %q %q 1",
				tc.name, v.Endpoint, v.Peer, v.Rule, v.Policy, v.Count, tc.endpoint, tc.peer, tc.rule, tc.policy)
		}
	}
}

// exhaustedNamer is fakeNamer on a datapath that ran out of rule ids.
type exhaustedNamer struct{ fakeNamer }

func (exhaustedNamer) RuleIDsExhausted() bool { return true }

// TestDescribeRuleIDsExhausted: once the ids ran out, an allowed new
// connection of an isolated direction without a rule id says so; one of
// a direction that is not isolated, a known id and a drop say what they
// said before.
func TestDescribeRuleIDsExhausted(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    Namer
		ev   bpfmaps.Event
		rule string
	}{
		{"unnamed rule", exhaustedNamer{}, bpfmaps.Event{Ifindex: 7, Peer: 300, Reason: bpfmaps.ReasonAllowedNew}, "rule ids exhausted"},
		{"ids not exhausted", fakeNamer{}, bpfmaps.Event{Ifindex: 7, Peer: 300, Reason: bpfmaps.ReasonAllowedNew}, "not isolated"},
		{"not isolated", exhaustedNamer{}, bpfmaps.Event{Ifindex: 7, Reason: bpfmaps.ReasonAllowedNew}, "not isolated"},
		{"named rule", exhaustedNamer{}, bpfmaps.Event{Ifindex: 7, Peer: 300, Rule: 1, Reason: bpfmaps.ReasonAllowedNew}, "shop/allow-web ingress[2]"},
		{"default deny", exhaustedNamer{}, bpfmaps.Event{Ifindex: 7, Peer: 300, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonPolicyIngress}, "default deny"},
	} {
		if v := Describe(tc.ev, tc.n, time.Unix(0, 0)); v.Rule != tc.rule {
			t.Errorf("%s: rule %q, want %q", tc.name, v.Rule, tc.rule)
		}
	}
}

// isolatorsNamer knows that shop/deny-all and shop/web-in isolate the
// ingress of ifindex 7.
type isolatorsNamer struct{ fakeNamer }

func (isolatorsNamer) Isolators(ifindex uint32, dir uint8) []string {
	if ifindex == 7 && dir == 0 {
		return []string{"shop/deny-all", "shop/web-in"}
	}
	return nil
}

// A default-deny drop names the policies isolating its pod in its
// direction, and --policy finds it by any of them; an allowed connection
// and a drop for another reason name none.
func TestDescribeNamesIsolators(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   bpfmaps.Event
		want []string
	}{
		{"default deny of ingress", bpfmaps.Event{Ifindex: 7, Peer: 300, Dir: 0, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonPolicyIngress},
			[]string{"shop/deny-all", "shop/web-in"}},
		{"default deny of egress, not isolated by them", bpfmaps.Event{Ifindex: 7, Peer: 300, Dir: 1, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonPolicyEgress}, nil},
		{"allowed by a rule", bpfmaps.Event{Ifindex: 7, Peer: 300, Rule: 1, Reason: bpfmaps.ReasonAllowedNew}, nil},
		{"anti-spoofing", bpfmaps.Event{Ifindex: 7, Verdict: bpfmaps.VerdictDrop, Reason: bpfmaps.ReasonSpoofed}, nil},
	} {
		v := Describe(tc.ev, isolatorsNamer{}, time.Unix(0, 0))
		if !slices.Equal(v.Isolators, tc.want) {
			t.Errorf("%s: isolators %q, want %q", tc.name, v.Isolators, tc.want)
		}
		for _, p := range tc.want {
			if !(Filter{Policy: p}).Match(v) {
				t.Errorf("%s: --policy %s does not match it", tc.name, p)
			}
		}
		if len(tc.want) > 0 && (Filter{Policy: "shop/other"}).Match(v) {
			t.Errorf("%s: --policy shop/other matches it", tc.name)
		}
	}
}
