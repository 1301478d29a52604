package iptables

import (
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestFailedPolicyMatchesEBPF: a policy that fails closed reaches both
// dataplanes as the same Desired, and the rules decide what the eBPF
// programs decide: the pod it selects (ep0) refuses every new connection
// in the direction it declares, including those another policy allowed,
// and every other pod keeps the verdicts it has without the bad policy.
func TestFailedPolicyMatchesEBPF(t *testing.T) {
	pods := []*policyapi.Pod{
		{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "a", Labels: map[string]string{"app": "a"}}},
		{ObjectMeta: policyapi.ObjectMeta{Namespace: "other", Name: "b", Labels: map[string]string{"app": "b"}}},
		{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "c", Labels: map[string]string{"app": "c"}}},
	}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	allow := func(ns, app string, port int32) *policyapi.NetworkPolicy {
		return &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: "allow-" + app},
			Spec: policyapi.NetworkPolicySpec{PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(port)}}}}}}
	}
	bad := &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "bad"},
		Spec: policyapi.NetworkPolicySpec{PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/33"}}}}}}}
	compile := func(policies ...*policyapi.NetworkPolicy) *policy.Desired {
		s := &policy.Snapshot{Pods: pods, Policies: policies, Identities: map[string]policyapi.Peer{}, Limits: policy.DefaultLimits}
		for i, p := range pods {
			s.Identities[policyapi.IdentityKey(nil, p)] = policyapi.FirstPodIdentity + policyapi.Peer(i)
			s.Local = append(s.Local, policy.LocalEndpoint{HostIfName: semIfs[i], Namespace: p.Namespace, PodName: p.Name, IPv4: addrs[i]})
		}
		d, err := policy.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	good := []*policyapi.NetworkPolicy{allow("team", "a", 80), allow("other", "b", 443), allow("team", "c", 80)}
	base, failed := compile(good...), compile(append(good, bad)...)
	if failed.Endpoints["ep0"].Failed[policyapi.Ingress] == "" {
		t.Fatalf("ep0: %+v, want its ingress failed closed", failed.Endpoints["ep0"])
	}
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			verdicts := map[*policy.Desired]map[testPacket]bool{}
			for _, want := range []*policy.Desired{base, failed} {
				n := newFakeNode()
				d, err := New(Options{Mode: m, Runner: n})
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range semIfs {
					if err := d.Attach(name); err != nil {
						t.Fatal(err)
					}
				}
				mustApply(t, d, want)
				assertNoViolations(t, n)
				verdicts[want] = map[testPacket]bool{}
				route := routeTo(want)
				for from := range semIfs {
					for to := range semIfs {
						if from == to {
							continue
						}
						for _, port := range []uint16{80, 443, 8080} {
							p := testPacket{hook: "FORWARD", in: semIfs[from], out: semIfs[to], src: addrs[from], dst: addrs[to], proto: policyapi.ProtoTCP, dport: port}
							got, err := n.evalPaths(m, p, route)
							if err != nil {
								t.Fatalf("evaluate %v: %v", p, err)
							}
							if ref := refPaths(want, p, route, iptablesDataplane); !samePaths(got, ref) {
								t.Fatalf("%v: iptables %v, eBPF %v\nendpoints: %s", p, got, ref, dumpEndpoints(want))
							}
							verdicts[want][p] = len(got) == 1 && got[0].verdict == "ACCEPT"
						}
					}
				}
			}
			for p, now := range verdicts[failed] {
				before := verdicts[base][p]
				switch {
				case p.out == "ep0" && now:
					t.Errorf("%v: accepted into ep0, whose ingress fails closed", p)
				case p.out != "ep0" && now != before:
					t.Errorf("%v: %v with the bad policy, %v without: it selects only ep0", p, now, before)
				}
			}
			if p := (testPacket{hook: "FORWARD", in: "ep1", out: "ep0", src: addrs[1], dst: addrs[0], proto: policyapi.ProtoTCP, dport: 80}); !verdicts[base][p] {
				t.Errorf("%v: refused without the bad policy; the test proves nothing", p)
			}
		})
	}
}
