package iptables

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func ports(lohi ...uint16) []policy.PortRange {
	var out []policy.PortRange
	for i := 0; i+1 < len(lohi); i += 2 {
		out = append(out, policy.PortRange{Lo: lohi[i], Hi: lohi[i+1]})
	}
	return out
}

const class1 = policyapi.CIDRClassBit | 1

func TestRenderEndpoint(t *testing.T) {
	all := ports(0, 65535)
	tests := []struct {
		name     string
		ep       policy.EndpointPolicy
		fam      Family
		egress   []string
		ingress  []string
		wantRefs []ref
		noep     string // the set of frontends without backends
	}{{
		name:   "not isolated: anti-spoofing only",
		ep:     policy.EndpointPolicy{IPv4: addr("10.0.0.5")},
		fam:    IPv4,
		egress: []string{"! -s 10.0.0.5/32 -j DROP"},
	}, {
		name:   "no IPv4 address: every IPv4 packet from the pod is spoofed",
		ep:     policy.EndpointPolicy{IPv6: addr("fd00::5")},
		fam:    IPv4,
		egress: []string{"-j DROP"},
	}, {
		name:    "IPv6 anti-spoofing leaves link-local ICMPv6 to LOCKSTEP-LL6, then ND and MLD to LOCKSTEP-ND6",
		ep:      policy.EndpointPolicy{IPv6: addr("fd00::5")},
		fam:     IPv6,
		egress:  []string{"! -s fd00::5/128 -j LOCKSTEP-LL6", "-d ::/128 -j DROP", "-d ::ffff:0.0.0.0/96 -j DROP", "-p ipv6-icmp -j LOCKSTEP-ND6"},
		ingress: []string{"-s ::/128 -j DROP", "-d ::/128 -j DROP", "-p ipv6-icmp -j LOCKSTEP-ND6-IN"},
	}, {
		name:   "ingress isolated, no rules: replies only",
		ep:     policy.EndpointPolicy{IPv4: addr("10.0.0.5"), IngressIsolated: true},
		fam:    IPv4,
		egress: []string{"! -s 10.0.0.5/32 -j DROP"},
		ingress: []string{
			"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
			"-j DROP",
		},
	}, {
		name: "peers, protocols and ports",
		ep: policy.EndpointPolicy{IPv4: addr("10.0.0.5"), IngressIsolated: true, EgressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}:                  all,
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoOther}:                all,
			{Peer: policyapi.PeerWorld, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}:  ports(53, 53),
			{Peer: policyapi.PeerAny, Dir: policyapi.Ingress, Proto: policyapi.ProtoSCTP}:   ports(1000, 2000),
			{Peer: class1, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}:                ports(80, 80, 443, 443, 8000, 8100),
			{Peer: policyapi.NoCIDRClass, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}: all, // matches nothing
			{Peer: 7, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}:                     all, // reserved: nothing
			{Peer: policyapi.PeerAny, Dir: policyapi.Egress, Proto: policyapi.ProtoOther}:   all,
			{Peer: policyapi.PeerWorld, Dir: policyapi.Egress, Proto: policyapi.ProtoOther}: all,
			{Peer: 301, Dir: policyapi.Egress, Proto: policyapi.ProtoUDP}:                   nil, // no range: nothing
		}},
		fam: IPv4,
		egress: []string{
			"! -s 10.0.0.5/32 -j DROP",
			"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
			"-p tcp -m set --match-set lockstep-nft4-net-1 dst -m multiport --dports 80,443,8000:8100 -j RETURN",
			"-p tcp -j DROP", "-p udp -j DROP", "-p sctp -j DROP",
			"-j RETURN",
			"-m set ! --match-set lockstep-nft4-pods dst -j RETURN",
			"-j DROP",
		},
		ingress: []string{
			"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
			"-p tcp -m set --match-set lockstep-nft4-id-300 src -j RETURN",
			"-p udp -m set ! --match-set lockstep-nft4-pods src -m udp --dport 53 -j RETURN",
			"-p sctp -m sctp --dport 1000:2000 -j RETURN",
			"-p tcp -j DROP", "-p udp -j DROP", "-p sctp -j DROP",
			"-m set --match-set lockstep-nft4-id-300 src -j RETURN",
			"-j DROP",
		},
		wantRefs: []ref{{peer: policyapi.PeerWorld}, {peer: 300}, {peer: 301}, {peer: class1}},
	}, {
		name: "identities with the same protocol and ports share one union rule",
		ep: policy.EndpointPolicy{IPv4: addr("10.0.0.5"), IngressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: 302, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}:    ports(80, 80, 8080, 8090),
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}:    ports(80, 80, 8080, 8090),
			{Peer: 301, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}:    ports(443, 443),           // other ports: its own rule
			{Peer: 303, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}:    ports(80, 80, 8080, 8090), // other protocol
			{Peer: 304, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}:    ports(80, 80, 8080, 8090), // ... with 303
			{Peer: class1, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(80, 80, 8080, 8090), // a CIDR class keeps its set
			{Peer: 300, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}:     ports(80, 80, 8080, 8090), // other direction
		}},
		fam:    IPv4,
		egress: []string{"! -s 10.0.0.5/32 -j DROP"},
		ingress: []string{
			"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
			"-p tcp -m set --match-set " + unionSetName(ModeNFT, IPv4, "300,302") + " src -m multiport --dports 80,8080:8090 -j RETURN",
			"-p tcp -m set --match-set lockstep-nft4-id-301 src -m tcp --dport 443 -j RETURN",
			"-p tcp -m set --match-set lockstep-nft4-net-1 src -m multiport --dports 80,8080:8090 -j RETURN",
			"-p udp -m set --match-set " + unionSetName(ModeNFT, IPv4, "303,304") + " src -m multiport --dports 80,8080:8090 -j RETURN",
			"-j DROP",
		},
		wantRefs: []ref{{union: "300,302"}, {union: "303,304"}, {peer: 300}, {peer: 301}, {peer: class1}},
	}, {
		name: "more ranges than one multiport holds",
		ep: policy.EndpointPolicy{IPv6: addr("fd00::5"), IngressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: policyapi.PeerAny, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(1, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19, 21, 21, 23, 24),
		}},
		fam:    IPv6,
		egress: []string{"! -s fd00::5/128 -j LOCKSTEP-LL6", "-d ::/128 -j DROP", "-d ::ffff:0.0.0.0/96 -j DROP", "-p ipv6-icmp -j LOCKSTEP-ND6"},
		ingress: []string{
			"-s ::/128 -j DROP",
			"-d ::/128 -j DROP",
			"-p ipv6-icmp -j LOCKSTEP-ND6-IN",
			"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
			"-p tcp -m multiport --dports 1,3:4,6:7,9:10,12:13,15:16,18:19,21 -j RETURN",
			"-p tcp -m multiport --dports 23:24 -j RETURN",
			"-j DROP",
		},
	}}
	r := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			er, err := newEPRender("ls-a", &tt.ep)
			if err != nil {
				t.Fatal(err)
			}
			got := r.renderEndpoint(tt.fam, er, func(ref) bool { return true }, tt.noep)
			if !slices.Equal(got[0], tt.egress) {
				t.Errorf("egress chain:\n got %q\nwant %q", got[0], tt.egress)
			}
			if !slices.Equal(got[1], tt.ingress) {
				t.Errorf("ingress chain:\n got %q\nwant %q", got[1], tt.ingress)
			}
			if tt.wantRefs != nil && !slices.Equal(er.refs, tt.wantRefs) {
				t.Errorf("refs %v, want %v", er.refs, tt.wantRefs)
			}
		})
	}
}

func TestRenderRejectsUnknownProtocol(t *testing.T) {
	ep := &policy.EndpointPolicy{Rules: map[policy.RuleKey][]policy.PortRange{{Peer: policyapi.PeerAny, Proto: 47}: nil}}
	if _, err := newEPRender("ls-a", ep); err == nil || !strings.Contains(err.Error(), "protocol 47") {
		t.Fatalf("got %v, want an error naming protocol 47", err)
	}
}

// TestNetSets checks the hash:net sets against the LPM they must equal:
// excepts become nomatch entries, a default route of a class becomes its
// two halves, and a pod whose class differs from its prefix's gets a host
// entry.
func TestNetSets(t *testing.T) {
	c1, c2 := policyapi.CIDRClassBit|1, policyapi.CIDRClassBit|2
	tests := []struct {
		name  string
		cidrs map[netip.Prefix]policyapi.Peer
		addrs map[netip.Addr]policy.AddrEntry
		want  map[string]map[netip.Prefix]bool
	}{{
		name: "ipBlock with an except",
		cidrs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass,
			prefix("10.0.0.0/8"): c1, prefix("10.1.0.0/16"): policyapi.NoCIDRClass,
		},
		want: map[string]map[netip.Prefix]bool{
			"lockstep-nft4-net-1": {prefix("10.0.0.0/8"): false, prefix("10.1.0.0/16"): true},
			"lockstep-nft6-net-1": {},
		},
	}, {
		name: "nested classes: a nomatch only under an ancestor of the class",
		cidrs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass,
			prefix("10.0.0.0/8"): c1, prefix("10.1.0.0/16"): c2, prefix("10.1.2.0/24"): c1,
			prefix("172.16.0.0/12"): c2,
		},
		want: map[string]map[netip.Prefix]bool{
			"lockstep-nft4-net-1": {prefix("10.0.0.0/8"): false, prefix("10.1.0.0/16"): true, prefix("10.1.2.0/24"): false},
			"lockstep-nft4-net-2": {prefix("10.1.0.0/16"): false, prefix("10.1.2.0/24"): true, prefix("172.16.0.0/12"): false},
			"lockstep-nft6-net-1": {}, "lockstep-nft6-net-2": {},
		},
	}, {
		name: "default route of a class: two halves, an except under it",
		cidrs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"): c1, prefix("::/0"): c1,
			prefix("10.0.0.0/8"): policyapi.NoCIDRClass, prefix("128.0.0.0/1"): c1,
		},
		want: map[string]map[netip.Prefix]bool{
			"lockstep-nft4-net-1": {prefix("0.0.0.0/1"): false, prefix("128.0.0.0/1"): false, prefix("10.0.0.0/8"): true},
			"lockstep-nft6-net-1": {prefix("::/1"): false, prefix("8000::/1"): false},
		},
	}, {
		name: "pods whose class is not their prefix's",
		cidrs: map[netip.Prefix]policyapi.Peer{
			prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass,
			prefix("10.0.0.0/8"): c1,
		},
		addrs: map[netip.Addr]policy.AddrEntry{
			addr("10.0.0.1"): {Identity: 300, CIDRClass: c1},                    // agrees: no entry
			addr("10.0.0.2"): {Identity: 300, CIDRClass: c2},                    // in c2 instead
			addr("11.0.0.1"): {Identity: 300, CIDRClass: c1},                    // in c1 although outside
			addr("fd00::1"):  {Identity: 300, CIDRClass: policyapi.NoCIDRClass}, // agrees
		},
		want: map[string]map[netip.Prefix]bool{
			"lockstep-nft4-net-1": {prefix("10.0.0.0/8"): false, prefix("10.0.0.2/32"): true, prefix("11.0.0.1/32"): false},
			"lockstep-nft4-net-2": {prefix("10.0.0.2/32"): false},
			"lockstep-nft6-net-1": {}, "lockstep-nft6-net-2": {},
		},
	}}
	r := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes := map[policyapi.Peer]bool{}
			for name := range tt.want {
				if strings.HasSuffix(name, "-1") {
					classes[c1] = true
				} else {
					classes[c2] = true
				}
			}
			got := r.netSets(&policy.Desired{CIDRs: tt.cidrs, Addrs: tt.addrs}, classes)
			if len(got) != len(tt.want) {
				t.Fatalf("got sets %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tt.want)))
			}
			for name, want := range tt.want {
				if s := got[name]; s == nil || !maps.Equal(s.entries, want) {
					t.Errorf("%s: got %v, want %v", name, got[name], want)
				}
			}
		})
	}
}

func TestCheckIfName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"ls-a", true}, {"lxc0123456789ab", true}, {"veth1.100", true}, {"eth0@if3", true},
		{"", false}, {"lxc0123456789abc", false}, {"eth+", false}, {"-eth0", false},
		{"!eth0", false}, {"eth 0", false}, {`eth"0`, false}, {"eth/0", false},
	} {
		err := checkIfName(tt.name)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrBadIfName) {
			t.Errorf("checkIfName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestSetNamesFitAndDifferByMode(t *testing.T) {
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		for _, f := range families {
			for _, peer := range []policyapi.Peer{policyapi.PeerWorld, policyapi.CIDRClassBit | (1<<31 - 1), 1<<31 - 1} {
				name, ok := setName(m, f, peer)
				if !ok || len(name) > 31 {
					t.Errorf("set name %q for %s %s peer %d: ok=%v, %d characters (ipset allows 31)", name, m, f, peer, ok, len(name))
				}
				other := ModeNFT
				if m == ModeNFT {
					other = ModeLegacy
				}
				if !isModeSet(m, name) || isModeSet(other, name) {
					t.Errorf("set %q must belong to %s only", name, m)
				}
			}
			u := unionSetName(m, f, "256,300,4294967295")
			if len(u) > 31 || !isModeSet(m, u) || u == unionSetName(m, f, "256,300") {
				t.Errorf("union set name %q: %d characters (ipset allows 31), or not distinct", u, len(u))
			}
		}
	}
}

// TestUnionSets: a union set holds the addresses of all its identities in
// each family, is shared by endpoints allowing the same identities, and
// an identity only a union references gets no set of its own.
func TestUnionSets(t *testing.T) {
	d := &policy.Desired{
		Addrs: map[netip.Addr]policy.AddrEntry{
			addr("10.1.0.1"): {Identity: 300, CIDRClass: policyapi.NoCIDRClass},
			addr("10.1.0.2"): {Identity: 301, CIDRClass: policyapi.NoCIDRClass},
			addr("fd01::2"):  {Identity: 301, CIDRClass: policyapi.NoCIDRClass},
			addr("10.1.0.3"): {Identity: 302, CIDRClass: policyapi.NoCIDRClass},
		},
		Endpoints: map[string]*policy.EndpointPolicy{},
	}
	for _, name := range []string{"ep0", "ep1"} {
		d.Endpoints[name] = &policy.EndpointPolicy{IngressIsolated: true, Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: 300, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(80, 80),
			{Peer: 301, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(80, 80),
			{Peer: 302, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}: ports(81, 81),
		}}
	}
	r := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}}
	p, _, err := r.render(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[netip.Prefix]bool{}
	for name, s := range p.sets {
		got[name] = s.entries
	}
	want := map[string]map[netip.Prefix]bool{
		unionSetName(ModeNFT, IPv4, "300,301"): {prefix("10.1.0.1/32"): false, prefix("10.1.0.2/32"): false},
		unionSetName(ModeNFT, IPv6, "300,301"): {prefix("fd01::2/128"): false},
		"lockstep-nft4-id-302":                 {prefix("10.1.0.3/32"): false},
	}
	if !maps.EqualFunc(got, want, maps.Equal) {
		t.Errorf("sets:\n got %v\nwant %v", got, want)
	}
	v6 := p.chains[IPv6.index()]["LOCKSTEP-I-ep1"]
	if !slices.Contains(v6, "-p tcp -m set --match-set "+unionSetName(ModeNFT, IPv6, "300,301")+" src -m tcp --dport 80 -j RETURN") || len(v6) != 6 {
		t.Errorf("IPv6 ingress of ep1 %q: want the link rules and the union rule only (302 has no IPv6 pod)", v6)
	}
}

func TestHashSize(t *testing.T) {
	for _, tc := range []struct{ members, want int }{
		{0, 64}, {1, 64}, {256, 64}, {257, 128}, {10000, 4096}, {1 << 20, 1 << 18},
	} {
		if got := hashSize(tc.members); got != tc.want {
			t.Errorf("hashSize(%d) = %d, want %d", tc.members, got, tc.want)
		}
	}
}
