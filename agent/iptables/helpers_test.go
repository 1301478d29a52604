package iptables

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// newTestDataplane returns a Dataplane of mode m on r with every endpoint
// of the given states attached.
func newTestDataplane(tb testing.TB, m Mode, r Runner, states ...*policy.Desired) *Dataplane {
	tb.Helper()
	d, err := New(Options{Mode: m, Runner: r})
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range states {
		attachAll(tb, d, s)
	}
	return d
}

func attachAll(tb testing.TB, d *Dataplane, want *policy.Desired) {
	tb.Helper()
	for name := range want.Endpoints {
		if err := d.Attach(name); err != nil {
			tb.Fatal(err)
		}
	}
}

func mustApply(tb testing.TB, d *Dataplane, want *policy.Desired) {
	tb.Helper()
	if err := d.Apply(want); err != nil {
		tb.Fatalf("Apply: %v", err)
	}
}

// expectedView is what a fresh Dataplane of mode m leaves on a fresh node
// for want: the reference every repaired state must equal.
func expectedView(tb testing.TB, m Mode, want *policy.Desired) lockstepView {
	tb.Helper()
	n := newFakeNode()
	mustApply(tb, newTestDataplane(tb, m, n, want), want)
	return n.view(m)
}

// reachable cuts a chain after its first rule that matches every packet
// (the rules after it are dead: new content prepended over old), and drops
// the terminal rule prepending adds to content that lacks one.
func reachable(rules []string) []string {
	for i, r := range rules {
		if r == "-j DROP" || r == terminal {
			rules = rules[:i+1]
			break
		}
	}
	if n := len(rules); n > 0 && rules[n-1] == terminal {
		rules = rules[:n-1]
	}
	return rules
}

// diffViews describes how got differs from want (empty when equal).
// Hook chains are compared as sets: Apply appends to them.
func diffViews(got, want lockstepView) string {
	var b strings.Builder
	for i, f := range families {
		diffChains(&b, f.String(), got.chains[i], want.chains[i], isDispatch)
		if !slices.Equal(got.jumps[i], want.jumps[i]) {
			fmt.Fprintf(&b, "%s jumps:\n  got  %q\n  want %q\n", f, got.jumps[i], want.jumps[i])
		}
		diffChains(&b, f.String()+" nat", got.nat[i], want.nat[i], isNATDispatch)
		if !slices.Equal(got.natJumps[i], want.natJumps[i]) {
			fmt.Fprintf(&b, "%s nat jumps:\n  got  %q\n  want %q\n", f, got.natJumps[i], want.natJumps[i])
		}
	}
	for _, name := range sortedKeys(want.sets) {
		if g, ok := got.sets[name]; !ok {
			fmt.Fprintf(&b, "set %s missing\n", name)
		} else if !maps.Equal(g, want.sets[name]) {
			fmt.Fprintf(&b, "set %s:\n  got  %v\n  want %v\n", name, g, want.sets[name])
		}
	}
	for name := range got.sets {
		if _, ok := want.sets[name]; !ok {
			fmt.Fprintf(&b, "set %s should not exist\n", name)
		}
	}
	return b.String()
}

// diffChains describes how the chains got differ from want; the rules of
// the chains unordered reports are compared as sets.
func diffChains(b *strings.Builder, what string, got, want map[string][]string, unordered func(string) bool) {
	for _, c := range sortedKeys(want) {
		g, w := reachable(got[c]), reachable(want[c])
		if unordered(c) {
			g, w = slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(w))
		}
		if _, ok := got[c]; !ok {
			fmt.Fprintf(b, "%s chain %s missing\n", what, c)
		} else if !slices.Equal(g, w) {
			fmt.Fprintf(b, "%s chain %s:\n  got  %q\n  want %q\n", what, c, g, w)
		}
	}
	for c := range got {
		if _, ok := want[c]; !ok {
			fmt.Fprintf(b, "%s chain %s should not exist\n", what, c)
		}
	}
}

func assertView(tb testing.TB, n *fakeNode, m Mode, want *policy.Desired) {
	tb.Helper()
	if diff := diffViews(n.view(m), expectedView(tb, m, want)); diff != "" {
		tb.Fatalf("node state differs from the desired state:\n%s", diff)
	}
}

func assertNoViolations(tb testing.TB, n *fakeNode) {
	tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.violations) > 0 {
		tb.Fatalf("%d kernel invariant violations, first: %s", len(n.violations), n.violations[0])
	}
}

// twoPods is a node with server ls-a (10.0.0.5, fd00::5) whose ingress
// allows TCP 80 from identity from, and client addresses of identities
// 300 (10.0.0.1, fd00::1) and 301 (10.0.0.2, fd00::2).
func twoPods(from policyapi.Peer) *policy.Desired {
	return &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr("10.0.0.1"): {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			addr("10.0.0.2"): {Identity: 301, CIDRClass: policyapi.NoCIDRClass},
			addr("fd00::1"):  {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			addr("fd00::2"):  {Identity: 301, CIDRClass: policyapi.NoCIDRClass},
			addr("10.0.0.5"): {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
			addr("fd00::5"):  {Identity: 400, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs: map[netip.Prefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{"ls-a": {
			IPv4: addr("10.0.0.5"), IPv6: addr("fd00::5"), IngressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{{Peer: from, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(80, 80)},
		}},
	}
}

// manyEndpoints is an IPv4-only node with n endpoints ep0..ep(n-1); endpoint i's
// ingress allows TCP port 1000+i (plus shift) from identities 300+i%50 and
// 300+(i+1)%50, and egress to CIDR class 1 on 443.
func manyEndpoints(n int, shift uint16) *policy.Desired {
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{},
		CIDRs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass,
			prefix("172.16.0.0/12"): class1, prefix("172.16.5.0/24"): policyapi.NoCIDRClass,
		},
		Endpoints: map[string]*policy.EndpointPolicy{},
	}
	for i := range 100 {
		d.Addrs[netip.AddrFrom4([4]byte{10, 1, byte(i / 100), byte(i % 100)})] = policy.AddrEntry{Identity: 300 + policyapi.Peer(i%50), CIDRClass: policyapi.NoCIDRClass}
	}
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		d.Addrs[a] = policy.AddrEntry{Identity: 1000 + policyapi.Peer(i), CIDRClass: policyapi.NoCIDRClass}
		p := 1000 + uint16(i) + shift
		d.Endpoints[fmt.Sprintf("ep%d", i)] = &policy.EndpointPolicy{
			IPv4: a, IngressIsolated: true, EgressIsolated: true,
			Rules: map[policy.RuleKey][]policy.PortRange{
				{Peer: 300 + policyapi.Peer(i%50), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}:     ports(p, p),
				{Peer: 300 + policyapi.Peer((i+1)%50), Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(p, p),
				{Peer: class1, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}:                          ports(443, 443),
			},
		}
	}
	return d
}

// payloadChains lists the chains a restore payload touches.
func payloadChains(payload string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(payload, "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			c, _, _ := strings.Cut(line[1:], " ")
			seen[c] = true
		case strings.HasPrefix(line, "-"):
			f := strings.Fields(line)
			seen[f[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
