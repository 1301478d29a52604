package policy

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func cls(n policyapi.Peer) policyapi.Peer { return policyapi.CIDRClassBit | n }

func TestCIDRClasses(t *testing.T) {
	block := func(cidr string, except ...string) *policyapi.CIDRBlock {
		b, err := policyapi.ParseIPBlock(&policyapi.IPBlock{CIDR: cidr, Except: except})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		blocks  []*policyapi.CIDRBlock
		lpm     map[netip.Prefix]policyapi.Peer
		classOf map[string]policyapi.Peer
	}{
		{
			name:    "no blocks",
			lpm:     map[netip.Prefix]policyapi.Peer{allIPv4: policyapi.NoCIDRClass, allIPv6: policyapi.NoCIDRClass},
			classOf: map[string]policyapi.Peer{"8.8.8.8": policyapi.NoCIDRClass, "::1": policyapi.NoCIDRClass},
		},
		{
			// Keys sorted: "0.0.0.0/0 -10.0.0.0/8" (0), "10.0.0.0/8 -10.1.0.0/16" (1),
			// "10.1.0.0/16" (2). Each prefix's remainder is in exactly one block.
			name:   "except carves out, a nested block fills in",
			blocks: []*policyapi.CIDRBlock{block("10.0.0.0/8", "10.1.0.0/16"), block("10.1.0.0/16"), block("0.0.0.0/0", "10.0.0.0/8")},
			lpm: map[netip.Prefix]policyapi.Peer{allIPv4: cls(1), pfx("10.0.0.0/8"): cls(2), pfx("10.1.0.0/16"): cls(3),
				allIPv6: policyapi.NoCIDRClass},
			classOf: map[string]policyapi.Peer{"8.8.8.8": cls(1), "10.2.0.1": cls(2), "10.1.2.3": cls(3), "::1": policyapi.NoCIDRClass},
		},
		{
			// "10.0.0.0/16" (0) sorts before "10.0.0.0/8" (1). 10.0/16 is in both,
			// the rest of 10/8 in one: sets [0 1] < [1].
			name:    "overlapping blocks",
			blocks:  []*policyapi.CIDRBlock{block("10.0.0.0/8"), block("10.0.0.0/16"), block("10.0.0.0/8")},
			lpm:     map[netip.Prefix]policyapi.Peer{allIPv4: policyapi.NoCIDRClass, allIPv6: policyapi.NoCIDRClass, pfx("10.0.0.0/8"): cls(2), pfx("10.0.0.0/16"): cls(1)},
			classOf: map[string]policyapi.Peer{"10.0.1.1": cls(1), "10.9.0.0": cls(2), "11.0.0.0": policyapi.NoCIDRClass},
		},
		{
			// 10.1.2.0/24 is excepted by both blocks, as its parent 10.1/16
			// already is: the entry would repeat the parent's class.
			name:   "redundant entries dropped",
			blocks: []*policyapi.CIDRBlock{block("10.0.0.0/8", "10.1.0.0/16"), block("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24")},
			lpm: map[netip.Prefix]policyapi.Peer{allIPv4: policyapi.NoCIDRClass, allIPv6: policyapi.NoCIDRClass, pfx("10.0.0.0/8"): cls(1),
				pfx("10.1.0.0/16"): policyapi.NoCIDRClass},
			classOf: map[string]policyapi.Peer{"10.1.2.3": policyapi.NoCIDRClass, "10.2.0.0": cls(1)},
		},
		{
			name:    "a block covering everything sets the default",
			blocks:  []*policyapi.CIDRBlock{block("::/0", "fd00::/8")},
			lpm:     map[netip.Prefix]policyapi.Peer{allIPv4: policyapi.NoCIDRClass, allIPv6: cls(1), pfx("fd00::/8"): policyapi.NoCIDRClass},
			classOf: map[string]policyapi.Peer{"2001:db8::1": cls(1), "fd00::1": policyapi.NoCIDRClass, "1.1.1.1": policyapi.NoCIDRClass},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCIDRClasses(tc.blocks)
			if !reflect.DeepEqual(c.lpm, tc.lpm) {
				t.Errorf("lpm = %v, want %v", c.lpm, tc.lpm)
			}
			for a, want := range tc.classOf {
				if got := c.classOf(addr(a)); got != want {
					t.Errorf("classOf(%s) = %#x, want %#x", a, got, want)
				}
			}
		})
	}
}

func TestCompileAddrs(t *testing.T) {
	except := mkPolicy("team", "p", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{
		{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24"}}},
		{IPBlock: &policyapi.IPBlock{CIDR: "fd00::/64"}}}}}})
	terminal := mkPod("team", "done", ips("10.0.0.50"), "app", "job")
	terminal.Status.Phase = policyapi.PodSucceeded
	host := mkPod("team", "host", ips("192.168.1.10"), "app", "node-agent")
	host.Spec.HostNetwork = true
	// The local endpoint's allocation wins over a stale remote pod object.
	stale := mkPod("team", "stale", ips("10.0.0.1"), "app", "old")
	// Of two remote pods claiming an address, the first by namespace/name.
	dupA := mkPod("other", "y", ips("10.0.2.7"), "app", "y")
	dupB := mkPod("other", "z", ips("10.0.2.7"), "app", "z")
	sc := scenario{
		namespaces: []*policyapi.Namespace{mkNS("team"), mkNS("other")},
		pods: []*policyapi.Pod{mkPod("team", "a", ips("10.0.0.1", "fd00::1"), "app", "a"),
			mkPod("team", "in", ips("10.0.0.9"), "app", "in"),
			mkPod("team", "out", ips("10.0.1.9", "::ffff:10.0.3.3"), "app", "out"),
			mkPod("team", "none", nil, "app", "none"),
			terminal, host, stale, dupB, dupA},
		policies: []*policyapi.NetworkPolicy{except},
		local:    localA,
	}
	s := sc.snapshot()
	d, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	// Keys: "10.0.0.0/16 -10.0.1.0/24" (0), "fd00::/64" (1); class1 = {0}, class2 = {1}.
	wantCIDRs := map[netip.Prefix]policyapi.Peer{allIPv4: policyapi.NoCIDRClass, allIPv6: policyapi.NoCIDRClass,
		pfx("10.0.0.0/16"): cls(1), pfx("10.0.1.0/24"): policyapi.NoCIDRClass, pfx("fd00::/64"): cls(2)}
	if !reflect.DeepEqual(d.CIDRs, wantCIDRs) {
		t.Errorf("CIDRs = %v, want %v", d.CIDRs, wantCIDRs)
	}
	want := map[netip.Addr]AddrEntry{
		addr("10.0.0.1"): {idOf(t, s, "team/a"), cls(1)},
		addr("fd00::1"):  {idOf(t, s, "team/a"), cls(2)},
		addr("10.0.0.9"): {idOf(t, s, "team/in"), cls(1)},
		addr("10.0.1.9"): {idOf(t, s, "team/out"), policyapi.NoCIDRClass}, // in the except
		addr("10.0.3.3"): {idOf(t, s, "team/out"), cls(1)},                // mapped form unmapped
		addr("10.0.2.7"): {idOf(t, s, "other/y"), cls(1)},
	}
	if !reflect.DeepEqual(d.Addrs, want) {
		t.Errorf("Addrs:\n got %v\nwant %v", d.Addrs, want)
	}
	ep := d.Endpoints["lxc-a"]
	wantRules := map[RuleKey][]PortRange{}
	for _, c := range []policyapi.Peer{cls(1), cls(2)} {
		for _, proto := range allProtocols {
			wantRules[RuleKey{Peer: c, Dir: policyapi.Ingress, Proto: proto}] = []PortRange{allPorts}
		}
	}
	if !ep.IngressIsolated || ep.EgressIsolated || !reflect.DeepEqual(ep.Rules, wantRules) {
		t.Errorf("endpoint = %+v, want ingress-isolated with rules %v", ep, wantRules)
	}
}

func TestCompileUnknownPodEndpoint(t *testing.T) {
	// CNI ADD ran before the pod object arrived: the endpoint is enforced
	// (anti-spoofing) but not isolated, and its address has no identity,
	// even though a stale pod object claims it.
	sc := scenario{
		pods: []*policyapi.Pod{mkPod("team", "stale", ips("10.0.0.7"), "app", "old")},
		policies: []*policyapi.NetworkPolicy{mkPolicy("team", "deny", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{
			PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress}})},
		local: []LocalEndpoint{{HostIfName: "lxc-new", Namespace: "team", PodName: "new", IPv4: addr("10.0.0.7")}},
	}
	d, err := Compile(sc.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	want := &EndpointPolicy{IPv4: addr("10.0.0.7"), Rules: map[RuleKey][]PortRange{}, Origins: map[RuleKey]*RuleOrigin{}}
	if got := d.Endpoints["lxc-new"]; !reflect.DeepEqual(got, want) {
		t.Errorf("endpoint = %+v, want %+v", got, want)
	}
	if e, ok := d.Addrs[addr("10.0.0.7")]; ok {
		t.Errorf("unknown pod's address has Addrs entry %+v", e)
	}
}

func TestCompileLocalAddressesFromEndpoint(t *testing.T) {
	// A known pod whose object has no addresses yet: the endpoint's CNI
	// addresses are the pod's.
	sc := scenario{
		pods:  []*policyapi.Pod{mkPod("team", "a", nil, "app", "a")},
		local: localA,
	}
	s := sc.snapshot()
	d, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	id := idOf(t, s, "team/a")
	want := map[netip.Addr]AddrEntry{addr("10.0.0.1"): {id, policyapi.NoCIDRClass}, addr("fd00::1"): {id, policyapi.NoCIDRClass}}
	if !reflect.DeepEqual(d.Addrs, want) {
		t.Errorf("Addrs = %v, want %v", d.Addrs, want)
	}
	ep := d.Endpoints["lxc-a"]
	if ep.IPv4 != addr("10.0.0.1") || ep.IPv6 != addr("fd00::1") {
		t.Errorf("anti-spoofing addresses %v %v", ep.IPv4, ep.IPv6)
	}
}

func TestCompileErrors(t *testing.T) {
	podA := mkPod("team", "a", ips("10.0.0.1"), "app", "a")
	for _, tc := range []struct {
		name  string
		sc    scenario
		tweak func(*Snapshot)
		want  string
	}{
		{
			name:  "missing identity",
			sc:    scenario{pods: []*policyapi.Pod{podA}},
			tweak: func(s *Snapshot) { clear(s.Identities) },
			want:  "pod team/a: no identity for key",
		},
		{
			name: "identity below the pod range",
			sc:   scenario{pods: []*policyapi.Pod{podA}},
			tweak: func(s *Snapshot) {
				for k := range s.Identities {
					s.Identities[k] = policyapi.PeerWorld
				}
			},
			want: "pod team/a: identity 2 out of the pod range",
		},
		{
			name: "one identity for two keys",
			sc:   scenario{pods: []*policyapi.Pod{podA, mkPod("team", "b", ips("10.0.0.2"), "app", "b")}},
			tweak: func(s *Snapshot) {
				for k := range s.Identities {
					s.Identities[k] = 300
				}
			},
			want: "identity 300 is assigned to two keys",
		},
		{
			name: "bad pod address",
			sc:   scenario{pods: []*policyapi.Pod{mkPod("team", "a", ips("10.0.0.300"))}},
			want: `pod team/a: address "10.0.0.300"`,
		},
		{
			name: "duplicate endpoint",
			sc:   scenario{pods: []*policyapi.Pod{podA}, local: append(slices.Clone(localA), localA...)},
			want: "local endpoint lxc-a listed twice",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.sc.snapshot()
			if tc.tweak != nil {
				tc.tweak(s)
			}
			_, err := Compile(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCompileDoesNotModifySnapshot(t *testing.T) {
	p := mkPolicy("team", "p", &policyapi.LabelSelector{}, policyapi.NetworkPolicySpec{Egress: []policyapi.EgressRule{{Ports: []policyapi.NetworkPolicyPort{tcp(80)}}}})
	ns := mkNS("team")
	sc := scenario{namespaces: []*policyapi.Namespace{ns}, pods: []*policyapi.Pod{mkPod("team", "a", ips("10.0.0.1"))}, policies: []*policyapi.NetworkPolicy{p}, local: localA}
	if _, err := Compile(sc.snapshot()); err != nil {
		t.Fatal(err)
	}
	if p.Spec.PolicyTypes != nil || p.Spec.Egress[0].Ports[0].Protocol != nil || ns.Labels[policyapi.NamespaceNameLabel] != "" {
		t.Errorf("Compile defaulted its input: %+v %+v", p.Spec, ns.Labels)
	}
}
