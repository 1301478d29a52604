package masquerade

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/iptables"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestRules(t *testing.T) {
	tests := []struct {
		name   string
		c      Config
		v4, v6 []string
	}{
		{
			name: "standalone dual-stack node",
			c:    Config{Sources: prefixes("10.244.0.0/24", "fd00:10:244::/120"), Cluster: prefixes("10.244.0.0/24", "fd00:10:244::/120")},
			v4: []string{
				"-A LOCKSTEP-MASQ -d 10.244.0.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE",
			},
			v6: []string{
				"-A LOCKSTEP-MASQ -d fd00:10:244::/120 -j RETURN",
				"-A LOCKSTEP-MASQ -s fd00:10:244::/120 -j MASQUERADE",
			},
		},
		{
			name: "other nodes' blocks and the non-masquerade list, sorted",
			c: Config{
				Sources:       prefixes("10.244.3.0/24", "10.244.9.0/26"),
				Cluster:       prefixes("10.244.5.0/24", "10.244.1.0/24", "10.244.3.0/24", "10.244.9.0/26"),
				NonMasquerade: prefixes("192.168.0.0/16", "172.16.0.0/12"),
			},
			v4: []string{
				"-A LOCKSTEP-MASQ -d 10.244.1.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -d 10.244.3.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -d 10.244.5.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -d 10.244.9.0/26 -j RETURN",
				"-A LOCKSTEP-MASQ -d 172.16.0.0/12 -j RETURN",
				"-A LOCKSTEP-MASQ -d 192.168.0.0/16 -j RETURN",
				"-A LOCKSTEP-MASQ -s 10.244.3.0/24 -j MASQUERADE",
				"-A LOCKSTEP-MASQ -s 10.244.9.0/26 -j MASQUERADE",
			},
		},
		{
			name: "a cluster CIDR covers the blocks and pools inside it",
			c: Config{
				Sources: prefixes("10.244.3.0/24", "10.244.3.0/24", "fd00:10:244:3::/64"),
				Cluster: prefixes("10.244.0.0/16", "10.244.7.0/24", "10.244.3.0/24", "fd00:10:244::/48", "fd00:10:244:3::/64"),
			},
			v4: []string{
				"-A LOCKSTEP-MASQ -d 10.244.0.0/16 -j RETURN",
				"-A LOCKSTEP-MASQ -s 10.244.3.0/24 -j MASQUERADE",
			},
			v6: []string{
				"-A LOCKSTEP-MASQ -d fd00:10:244::/48 -j RETURN",
				"-A LOCKSTEP-MASQ -s fd00:10:244:3::/64 -j MASQUERADE",
			},
		},
		{
			name: "pools are never masqueraded to each other, even when the caller forgot them",
			c:    Config{Sources: prefixes("10.244.3.0/24")},
			v4: []string{
				"-A LOCKSTEP-MASQ -d 10.244.3.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -s 10.244.3.0/24 -j MASQUERADE",
			},
		},
		{
			name: "host bits, mapped addresses and host routes",
			c: Config{
				Sources:       prefixes("10.244.3.7/24"),
				NonMasquerade: prefixes("::ffff:203.0.113.9/128", "2001:db8::1/128"),
			},
			v4: []string{
				"-A LOCKSTEP-MASQ -d 10.244.3.0/24 -j RETURN",
				"-A LOCKSTEP-MASQ -d 203.0.113.9/32 -j RETURN",
				"-A LOCKSTEP-MASQ -s 10.244.3.0/24 -j MASQUERADE",
			},
		},
		{
			name: "IPv6-only pools",
			c:    Config{Sources: prefixes("fd00::/120"), NonMasquerade: prefixes("10.0.0.0/8", "2001:db8::/32")},
			v6: []string{
				"-A LOCKSTEP-MASQ -d 2001:db8::/32 -j RETURN",
				"-A LOCKSTEP-MASQ -d fd00::/120 -j RETURN",
				"-A LOCKSTEP-MASQ -s fd00::/120 -j MASQUERADE",
			},
		},
		{name: "no pools: nothing", c: Config{Cluster: prefixes("10.244.0.0/16"), NonMasquerade: prefixes("fd00::/8")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Rules(tt.c, iptables.IPv4); !slices.Equal(got, tt.v4) {
				t.Errorf("IPv4 rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.v4, "\n"))
			}
			if got := Rules(tt.c, iptables.IPv6); !slices.Equal(got, tt.v6) {
				t.Errorf("IPv6 rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.v6, "\n"))
			}
		})
	}
}

func TestConfigEqual(t *testing.T) {
	a := Config{Sources: prefixes("10.244.3.0/24"), Cluster: prefixes("10.244.0.0/16", "10.244.3.0/24")}
	tests := []struct {
		name string
		b    Config
		want bool
	}{
		{"same, reordered and with a contained prefix", Config{Sources: prefixes("10.244.3.1/24"), Cluster: prefixes("10.244.3.0/24", "10.244.0.0/16", "10.244.7.0/24")}, true},
		{"another pool", Config{Sources: prefixes("10.244.4.0/24"), Cluster: prefixes("10.244.0.0/16")}, false},
		{"a non-masquerade CIDR more", Config{Sources: prefixes("10.244.3.0/24"), Cluster: prefixes("10.244.0.0/16"), NonMasquerade: prefixes("10.0.0.0/8")}, false},
		{"empty", Config{}, false},
	}
	for _, tt := range tests {
		if got := a.Equal(tt.b); got != tt.want {
			t.Errorf("%s: Equal = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPlanPayload pins the restore payloads: an install inserts the jump
// first in POSTROUTING in the commit that fills the chain; a removal
// flushes, unhooks and deletes in one commit; a chain already right is no
// payload at all.
func TestPlanPayload(t *testing.T) {
	want := Rules(Config{Sources: prefixes("10.244.0.0/24")}, iptables.IPv4)
	jump := `-A POSTROUTING -m comment --comment "lockstep: masquerade pod traffic leaving the cluster" -j LOCKSTEP-MASQ`
	tests := []struct {
		name string
		cur  iptables.Chain
		want []string
		out  string
	}{
		{"install", iptables.Chain{}, want, `*nat
:LOCKSTEP-MASQ - [0:0]
-I POSTROUTING 1 -m comment --comment "lockstep: masquerade pod traffic leaving the cluster" -j LOCKSTEP-MASQ
-A LOCKSTEP-MASQ -d 10.244.0.0/24 -j RETURN
-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE
COMMIT
`},
		{"in sync", iptables.Chain{Exists: true, Rules: want, Jumps: []string{jump}}, want, ""},
		{"rules drifted, jump kept in place", iptables.Chain{Exists: true, Rules: want[:1], Jumps: []string{jump}}, want, `*nat
:LOCKSTEP-MASQ - [0:0]
-A LOCKSTEP-MASQ -d 10.244.0.0/24 -j RETURN
-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE
COMMIT
`},
		{"a stranger's jump and a duplicate go", iptables.Chain{Exists: true, Rules: want, Jumps: []string{jump, "-A OUTPUT -j LOCKSTEP-MASQ", jump}}, want, `*nat
:LOCKSTEP-MASQ - [0:0]
-D OUTPUT -j LOCKSTEP-MASQ
-D POSTROUTING -m comment --comment "lockstep: masquerade pod traffic leaving the cluster" -j LOCKSTEP-MASQ
-A LOCKSTEP-MASQ -d 10.244.0.0/24 -j RETURN
-A LOCKSTEP-MASQ -s 10.244.0.0/24 -j MASQUERADE
COMMIT
`},
		{"remove", iptables.Chain{Exists: true, Rules: want, Jumps: []string{jump}}, nil, `*nat
:LOCKSTEP-MASQ - [0:0]
-D POSTROUTING -m comment --comment "lockstep: masquerade pod traffic leaving the cluster" -j LOCKSTEP-MASQ
-X LOCKSTEP-MASQ
COMMIT
`},
		{"remove what is not there", iptables.Chain{}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(plan(tt.cur, tt.want)); got != tt.out {
				t.Fatalf("payload:\n%s\nwant:\n%s", got, tt.out)
			}
		})
	}
}
