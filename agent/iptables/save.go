package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// savedTable is one table of an iptables-save dump.
type savedTable struct {
	chains []string            // declared chains, in order
	rules  map[string][]string // chain -> rules, the text after "-A CHAIN "
	lines  []string            // every "-A ..." line, in order
}

// parseSave parses iptables-save output into its tables by name.
func parseSave(out []byte) (map[string]*savedTable, error) {
	tables := map[string]*savedTable{}
	var t *savedTable
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '*':
			t = &savedTable{rules: map[string][]string{}}
			tables[line[1:]] = t
		case t == nil:
			return nil, fmt.Errorf("parse iptables-save output: %q outside a table", line)
		case line == "COMMIT":
			t = nil
		case line[0] == ':':
			name, _, _ := strings.Cut(line[1:], " ")
			t.chains = append(t.chains, name)
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			t.rules[chain] = append(t.rules[chain], rule)
			t.lines = append(t.lines, line)
		default:
			return nil, fmt.Errorf("parse iptables-save output: unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse iptables-save output: %w", err)
	}
	return tables, nil
}

// ruleTarget is the chain or target a rule jumps (-j) or goes (-g) to.
func ruleTarget(fields []string) string {
	for i := len(fields) - 2; i >= 0; i-- {
		if fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto" {
			return fields[i+1]
		}
	}
	return ""
}

// lockstepIn returns the lockstep chains of t and the rules of other
// chains that jump into them (as "-A CHAIN ..." lines).
func lockstepIn(t *savedTable) (chains map[string][]string, foreign []string) {
	return lockstepInExcept(t, func(string) bool { return false })
}

// lockstepInExcept is lockstepIn with the chains skip reports left out,
// and the jumps into them: they count as chains that are not lockstep's.
func lockstepInExcept(t *savedTable, skip func(chain string) bool) (chains map[string][]string, foreign []string) {
	ours := func(c string) bool { return isLockstepChain(c) && !skip(c) }
	chains = map[string][]string{}
	for _, c := range t.chains {
		if ours(c) {
			chains[c] = t.rules[c]
		}
	}
	for _, line := range t.lines {
		fields := strings.Fields(line)
		if !ours(fields[1]) && ours(ruleTarget(fields)) {
			foreign = append(foreign, line)
		}
	}
	return chains, foreign
}

// parseIPSetSave parses `ipset save` output into sets by name.
func parseIPSetSave(out []byte) (map[string]*ipSet, error) {
	sets := map[string]*ipSet{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		switch fields[0] {
		case "create":
			fam := IPv4
			if i := slices.Index(fields, "family"); i > 0 && i+1 < len(fields) && fields[i+1] == "inet6" {
				fam = IPv6
			}
			s := newSet(fam, fields[2] == "hash:net")
			if fields[2] == "hash:ip,port" {
				s = newFrontendSet(fam)
			}
			sets[fields[1]] = s
		case "add":
			s := sets[fields[1]]
			if s == nil {
				return nil, fmt.Errorf("parse ipset save output: member of undeclared set %s", fields[1])
			}
			if s.ipPort {
				fr, err := parseFrontend(fields[2])
				if err != nil {
					return nil, fmt.Errorf("parse ipset save output: set %s: %w", fields[1], err)
				}
				s.frontends[fr] = struct{}{}
				continue
			}
			pfx, err := parseEntry(fields[2])
			if err != nil {
				return nil, fmt.Errorf("parse ipset save output: set %s: %w", fields[1], err)
			}
			s.entries[pfx] = slices.Contains(fields[3:], "nomatch")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse ipset save output: %w", err)
	}
	return sets, nil
}

// parseEntry parses a member as ipset prints it: an address (a host) or a
// prefix.
func parseEntry(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// entryText is a member as written to ipset restore: the address of a
// hash:ip member, the prefix of a hash:net one.
func entryText(s *ipSet, e netip.Prefix) string {
	if !s.net {
		return e.Addr().String()
	}
	return e.String()
}

func sortedPrefixes(m map[netip.Prefix]bool) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

// read reads back the lockstep sets and chains of the dataplane's mode and
// families, for a full reconcile: every lockstep chain of the filter
// table, and the Service chains of the nat table (not the masquerade
// chain of agent/masquerade, which lives there too). It reads all tables
// at once: naming the nat table would create it in legacy mode on a node
// that has none.
func (d *Dataplane) read() (*state, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	out, err := d.run.Run(ctx, ipsetTool, []string{"save"}, nil)
	if err != nil {
		return nil, fmt.Errorf("read ipsets: %w", err)
	}
	all, err := parseIPSetSave(out)
	if err != nil {
		return nil, err
	}
	st := &state{read: true, sets: map[string]*ipSet{}}
	for name, s := range all {
		for _, f := range d.r.fams {
			if strings.HasPrefix(name, setPrefix(d.mode, f)) {
				st.sets[name] = s
			}
		}
	}
	for _, f := range d.r.fams {
		out, err := d.run.Run(ctx, d.mode.SaveTool(f), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("read %s rules: %w", f, err)
		}
		tables, err := parseSave(out)
		if err != nil {
			return nil, err
		}
		st.chains[f.index()], st.nat[f.index()] = map[string][]string{}, map[string][]string{}
		if t := tables["filter"]; t != nil {
			st.chains[f.index()], st.foreign[f.index()] = lockstepIn(t)
		}
		if t := tables["nat"]; t != nil {
			st.nat[f.index()], st.natForeign[f.index()] = lockstepInExcept(t, func(c string) bool { return !isServiceChain(c) })
		}
	}
	return st, nil
}
