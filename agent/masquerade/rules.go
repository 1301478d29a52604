package masquerade

import (
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/iptables"
)

// ChainName is lockstep's masquerade chain, in the nat table of both
// families. Its LOCKSTEP- prefix makes it lockstep's to agent/iptables: its
// rules do not vote in iptables.Detect, and a clean-up of a mode removes
// it unless the caller keeps it (Chains).
const ChainName = "LOCKSTEP-MASQ"

// table is the netfilter table the chain lives in.
const table = "nat"

// hook is the built-in chain that jumps to ChainName: the last hook a
// forwarded packet passes, after routing picked the interface it leaves by
// and after the filter table (and the eBPF programs) judged it.
const hook = "POSTROUTING"

// jumpComment marks the jump, for whoever reads iptables-save.
const jumpComment = "lockstep: masquerade pod traffic leaving the cluster"

// jumpSpec is the jump's rule after "-A POSTROUTING" or "-I POSTROUTING 1",
// written as iptables-save prints it, so a saved jump compares equal.
var jumpSpec = `-m comment --comment "` + jumpComment + `" -j ` + ChainName

// Chains names the masquerade chain of both families, for the clean-ups
// of the iptables mode it lives in to keep (see iptables.Purge).
func Chains() []iptables.ChainRef {
	return []iptables.ChainRef{
		{Family: iptables.IPv4, Table: table, Chain: ChainName},
		{Family: iptables.IPv6, Table: table, Chain: ChainName},
	}
}

// Config is what the node masquerades: traffic from Sources to any
// destination outside Cluster, NonMasquerade and Sources themselves.
type Config struct {
	// Sources are the node's pools: the addresses of its pods (draining
	// pools included, while pods still hold their addresses).
	Sources []netip.Prefix
	// Cluster are the pod CIDRs of the whole cluster: traffic to another
	// pod, on any node, keeps the pod's address.
	Cluster []netip.Prefix
	// NonMasquerade are other destinations that route back to pods
	// without NAT (--non-masquerade-cidr).
	NonMasquerade []netip.Prefix
}

// Normalize returns c with every prefix masked and unmapped, sorted, and
// without duplicates or prefixes another of its list contains, so equal
// configurations compare equal.
func (c Config) Normalize() Config {
	return Config{Sources: minimal(c.Sources), Cluster: minimal(c.Cluster), NonMasquerade: minimal(c.NonMasquerade)}
}

// Equal reports whether c and o masquerade the same traffic the same way.
func (c Config) Equal(o Config) bool {
	c, o = c.Normalize(), o.Normalize()
	return slices.Equal(c.Sources, o.Sources) && slices.Equal(c.Cluster, o.Cluster) && slices.Equal(c.NonMasquerade, o.NonMasquerade)
}

// Rules returns the chain's rules in family f, as iptables-save prints
// them: first a RETURN for every destination that keeps the pod's address
// (Cluster, NonMasquerade and Sources, merged), then a MASQUERADE for
// every source. nil means the family has no source: no chain, no jump.
//
// A packet that RETURNs continues through POSTROUTING, so NAT rules of
// others (kube-proxy's) still apply to it.
func Rules(c Config, f iptables.Family) []string {
	sources := minimal(ofFamily(c.Sources, f))
	if len(sources) == 0 {
		return nil
	}
	keep := minimal(ofFamily(slices.Concat(c.Cluster, c.NonMasquerade, c.Sources), f))
	rules := make([]string, 0, len(keep)+len(sources))
	for _, p := range keep {
		rules = append(rules, "-A "+ChainName+" -d "+p.String()+" -j RETURN")
	}
	for _, p := range sources {
		rules = append(rules, "-A "+ChainName+" -s "+p.String()+" -j MASQUERADE")
	}
	return rules
}

// plan returns the iptables-restore payload that turns cur, the chain as
// the nat table holds it, into want (Rules' output; nil: no chain), or nil
// when cur is want already. The payload is one commit: the chain is never
// seen half-written, and the jump goes in only with the chain's rules.
func plan(cur iptables.Chain, want []string) []byte {
	ours := "-A " + hook + " " + jumpSpec
	if want == nil && !cur.Exists && len(cur.Jumps) == 0 {
		return nil
	}
	if want != nil && cur.Exists && slices.Equal(cur.Rules, want) && slices.Equal(cur.Jumps, []string{ours}) {
		return nil
	}
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	b.WriteString(":" + ChainName + " - [0:0]\n") // created, or flushed
	keptJump := false
	for _, j := range cur.Jumps {
		if want != nil && j == ours && !keptJump {
			keptJump = true // stays where it is
			continue
		}
		b.WriteString("-D" + strings.TrimPrefix(j, "-A") + "\n")
	}
	if want == nil {
		b.WriteString("-X " + ChainName + "\n")
	} else {
		if !keptJump {
			b.WriteString("-I " + hook + " 1 " + jumpSpec + "\n")
		}
		for _, r := range want {
			b.WriteString(r + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// ofFamily returns the prefixes of ps in family f.
func ofFamily(ps []netip.Prefix, f iptables.Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Unmap().Is4() == (f == iptables.IPv4) {
			out = append(out, p)
		}
	}
	return out
}

// minimal returns ps masked, unmapped and sorted, without invalid
// prefixes, duplicates, or prefixes another of ps contains.
func minimal(ps []netip.Prefix) []netip.Prefix {
	var all []netip.Prefix
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() {
			a, bits = a.Unmap(), max(bits-96, 0)
		}
		all = append(all, netip.PrefixFrom(a, bits).Masked())
	}
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range all {
		// Sorted by address then length: a container of p, if any, is an
		// earlier prefix or the same one.
		if slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) {
			continue
		}
		out = append(out, p)
	}
	return out
}
