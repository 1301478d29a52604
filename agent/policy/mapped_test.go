package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestCheckNotMapped: a prefix inside ::ffff:0:0/96 is refused, one that
// only contains that range, or lies outside it, is ordinary IPv6, and IPv4
// is IPv4.
func TestCheckNotMapped(t *testing.T) {
	for _, tc := range []struct {
		prefix  string
		refused bool
	}{
		{"::ffff:0:0/96", true},
		{"::ffff:0.0.0.0/96", true},
		{"::ffff:10.0.0.0/104", true},
		{"::ffff:10.1.2.3/128", true},
		{"::/0", false},
		{"::/64", false},
		{"::ffff:0:0/95", false}, // masks to ::fffe:0:0/95: contains the range
		{"::fffe:0:0/96", false},
		{"::1:ffff:0:0/96", false},
		{"64:ff9b::/96", false}, // NAT64 (RFC 6052), not mapped
		{"0.0.0.0/0", false},
		{"10.0.0.0/8", false},
		{"fd00::/8", false},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			err := policyapi.CheckNotMapped(netip.MustParsePrefix(tc.prefix).Masked())
			if refused := err != nil; refused != tc.refused {
				t.Fatalf("CheckNotMapped(%s) = %v, want refused %v", tc.prefix, err, tc.refused)
			}
			if tc.refused && !errors.Is(err, policyapi.ErrMappedPrefix) {
				t.Errorf("CheckNotMapped(%s) = %v, want it to wrap ErrMappedPrefix", tc.prefix, err)
			}
		})
	}
}

// TestMappedIPBlockRefused: a policy with an IPv4-mapped ipBlock cidr or
// except fails validation with an error naming the policy, the field and
// the IPv4 prefix meant, and fails closed in both compilers with it; the IPv4 and
// IPv6 default routes it would have collided with still compile apart.
func TestMappedIPBlockRefused(t *testing.T) {
	egressTo := func(b policyapi.IPBlock) policyapi.NetworkPolicySpec {
		return policyapi.NetworkPolicySpec{
			PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
			Egress:      []policyapi.EgressRule{{To: []policyapi.NetworkPolicyPeer{{IPBlock: &b}}}},
		}
	}
	for _, tc := range []struct {
		name  string
		block policyapi.IPBlock
		want  string
	}{
		{"cidr of every IPv4 address", policyapi.IPBlock{CIDR: "::ffff:0.0.0.0/96"}, "spec.egress[0]: to[0]: ipBlock: cidr: IPv4-mapped IPv6 prefix: ::ffff:0.0.0.0/96 (write the IPv4 prefix 0.0.0.0/0 instead)"},
		{"cidr of one IPv4 network", policyapi.IPBlock{CIDR: "::ffff:10.0.0.0/104"}, "ipBlock: cidr: IPv4-mapped IPv6 prefix: ::ffff:10.0.0.0/104 (write the IPv4 prefix 10.0.0.0/8 instead)"},
		{"except", policyapi.IPBlock{CIDR: "::/0", Except: []string{"fd00::/8", "::ffff:10.0.0.0/104"}}, "ipBlock: except[1]: IPv4-mapped IPv6 prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := mkPolicy("team", "np", sel(), egressTo(tc.block))
			err := np.Validate()
			if err == nil || !errors.Is(err, policyapi.ErrMappedPrefix) {
				t.Fatalf("Validate = %v, want an error wrapping ErrMappedPrefix", err)
			}
			if !strings.HasPrefix(err.Error(), "networkpolicy team/np: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %q, want it to name team/np and contain %q", err, tc.want)
			}

			sc := scenario{
				namespaces: []*policyapi.Namespace{mkNS("team")},
				pods:       []*policyapi.Pod{mkPod("team", "a", ips("10.0.0.1", "fd00::1"))},
				policies:   []*policyapi.NetworkPolicy{np},
			}
			// The compilers fail the policy alone, closed: its reason names
			// the field, and none of its prefixes reaches the maps.
			d, err := Compile(sc.snapshot())
			if err != nil {
				t.Fatalf("Compile = %v, want the policy to fail alone", err)
			}
			inc := NewIncremental()
			feedSnapshot(inc, sc.snapshot())
			id, err := inc.Compile()
			if err != nil {
				t.Fatalf("Incremental.Compile = %v, want the policy to fail alone", err)
			}
			for name, got := range map[string]*Desired{"Compile": d, "Incremental.Compile": id} {
				if why := got.FailedPolicies["team/np"]; !strings.Contains(why, tc.want) {
					t.Errorf("%s: team/np fails with %q, want a reason containing %q", name, why, tc.want)
				}
				for pfx := range got.CIDRs {
					if err := policyapi.CheckNotMapped(pfx); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		})
	}

	t.Run("IPv4 and IPv6 default routes stay apart", func(t *testing.T) {
		v4 := mkPolicy("team", "v4", sel(), egressTo(policyapi.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}))
		v6 := mkPolicy("team", "v6", sel(), egressTo(policyapi.IPBlock{CIDR: "::/0"}))
		sc := scenario{namespaces: []*policyapi.Namespace{mkNS("team")}, policies: []*policyapi.NetworkPolicy{v4, v6}}
		d, err := Compile(sc.snapshot())
		if err != nil {
			t.Fatal(err)
		}
		for pfx := range d.CIDRs {
			if err := policyapi.CheckNotMapped(pfx); err != nil {
				t.Errorf("compiled CIDRs hold %s: %v", pfx, err)
			}
		}
		all4, all6, ten := d.CIDRs[allIPv4], d.CIDRs[allIPv6], d.CIDRs[netip.MustParsePrefix("10.0.0.0/8")]
		if all4 == policyapi.NoCIDRClass || all6 == policyapi.NoCIDRClass || all4 == all6 || ten != policyapi.NoCIDRClass {
			t.Errorf("CIDRs %v: want 0.0.0.0/0 and ::/0 in two distinct classes and 10.0.0.0/8 in none", d.CIDRs)
		}
	})
}
