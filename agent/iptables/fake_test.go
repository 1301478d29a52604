package iptables

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// fakeNode is one network namespace's ipsets and iptables tables (both
// modes, both families) behind a Runner that speaks the tools' command
// lines. It keeps the kernel's invariants, and records as violations the
// two a correct dataplane must never even attempt: referencing a set that
// does not exist, and destroying a set a rule references (seed 000).
type fakeNode struct {
	mu     sync.Mutex
	sets   map[string]*ipSet
	tables map[tableKey]*fakeTable

	calls      []fakeCall
	violations []string

	// faults, when set, picks a fault for each call.
	faults func(c fakeCall) fault
	// afterCommit, when set, runs (with mu held) after each table an
	// iptables-restore commits.
	afterCommit func(tableKey)
	// recent are the xt_recent lists: the sources each holds.
	recent map[string]map[netip.Addr]bool
}

type tableKey struct {
	mode  Mode
	fam   Family
	table string
}

type fakeTable struct {
	policy map[string]string   // built-in chain -> policy
	chains map[string][]string // chain -> rules (text after "-A CHAIN ")
}

type fakeCall struct {
	name  string
	args  []string
	stdin string
}

func (c fakeCall) String() string { return commandLine(c.name, c.args) }

// fault is what goes wrong with one call.
type fault int

const (
	faultNone    fault = iota
	faultBefore        // fails before doing anything (the xtables lock is taken)
	faultPartial       // a prefix of the batch is applied (iptables-restore: its first table)
	faultAfter         // does everything, then reports failure (killed)
)

func newFakeNode() *fakeNode {
	return &fakeNode{sets: map[string]*ipSet{}, tables: map[tableKey]*fakeTable{}}
}

// randomFaults fails a fraction of calls, with every kind of fault.
func randomFaults(seed uint64, fraction float64) func(fakeCall) fault {
	rng := rand.New(rand.NewPCG(seed, 0x10c4))
	var mu sync.Mutex
	return func(fakeCall) fault {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() >= fraction {
			return faultNone
		}
		return fault(1 + rng.IntN(3))
	}
}

func builtins(table string) []string {
	switch table {
	case "filter":
		return []string{"INPUT", "FORWARD", "OUTPUT"}
	case "nat":
		return []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
	}
	return []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
}

func (n *fakeNode) table(k tableKey) *fakeTable {
	t := n.tables[k]
	if t == nil {
		t = &fakeTable{policy: map[string]string{}, chains: map[string][]string{}}
		for _, c := range builtins(k.table) {
			t.policy[c] = "ACCEPT"
			t.chains[c] = nil
		}
		n.tables[k] = t
	}
	return t
}

// parseTool splits "ip6tables-legacy-restore" into its parts.
func parseTool(name string) (m Mode, f Family, verb string, ok bool) {
	f = IPv4
	rest, found := strings.CutPrefix(name, "iptables-")
	if !found {
		if rest, found = strings.CutPrefix(name, "ip6tables-"); !found {
			return 0, 0, "", false
		}
		f = IPv6
	}
	ms, verb, _ := strings.Cut(rest, "-")
	m, err := ParseMode(ms)
	return m, f, verb, err == nil
}

// Run implements Runner.
func (n *fakeNode) Run(_ context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := fakeCall{name: name, args: slices.Clone(args), stdin: string(stdin)}
	n.calls = append(n.calls, c)
	fl := faultNone
	if n.faults != nil {
		fl = n.faults(c)
	}
	fail := func(msg string) error {
		return &ExitError{Command: c.String(), Code: 1, Stderr: msg}
	}
	if fl == faultBefore {
		return nil, &ExitError{Command: c.String(), Code: 4, Stderr: "Another app is currently holding the xtables lock. Perhaps you want to use the -w option?"}
	}
	var out []byte
	var err error
	switch m, f, verb, ok := parseTool(name); {
	case name == ipsetTool:
		out, err = n.ipset(args, string(stdin), fl == faultPartial)
	case ok && verb == "restore":
		payload := string(stdin)
		if fl == faultPartial {
			// Killed after its first table's commit.
			if i := strings.Index(payload, "\nCOMMIT\n"); i >= 0 {
				payload = payload[:i+len("\nCOMMIT\n")]
			}
		}
		err = n.restore(m, f, args, payload)
	case ok && verb == "save":
		out, err = n.save(m, f, args)
	default:
		err = fmt.Errorf("fake node: unknown command %s", c)
	}
	if err != nil {
		return nil, fail(err.Error())
	}
	if fl != faultNone {
		return nil, &ExitError{Command: c.String(), Code: -1, Stderr: "signal: killed"}
	}
	return out, nil
}

func (n *fakeNode) violate(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	n.violations = append(n.violations, msg)
	return fmt.Errorf("%s", msg)
}

// referenced reports whether any rule of any table references set.
func (n *fakeNode) referenced(set string) bool {
	for _, t := range n.tables {
		for _, rules := range t.chains {
			for _, r := range rules {
				if slices.Contains(setRefs(r), set) {
					return true
				}
			}
		}
	}
	return false
}

func setRefs(rule string) []string {
	var out []string
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "--match-set" {
			out = append(out, f[i+1])
		}
	}
	return out
}

func (n *fakeNode) ipset(args []string, stdin string, partial bool) ([]byte, error) {
	exist := len(args) > 0 && args[0] == "-exist"
	if exist {
		args = args[1:]
	}
	switch {
	case len(args) == 1 && args[0] == "restore":
		lines := strings.Split(strings.TrimSpace(stdin), "\n")
		if partial {
			lines = lines[:len(lines)/2]
		}
		for i, line := range lines {
			if err := n.ipsetCmd(strings.Fields(line), exist); err != nil {
				return nil, fmt.Errorf("ipset v7.17: Error in line %d: %v", i+1, err)
			}
		}
		if partial {
			return nil, fmt.Errorf("ipset v7.17: interrupted")
		}
		return nil, nil
	case len(args) == 1 && args[0] == "save":
		var b strings.Builder
		for _, name := range sortedKeys(n.sets) {
			s := n.sets[name]
			fmt.Fprintf(&b, "create %s %s family %s hashsize 1024 maxelem %d bucketsize 12 initval 0x1\n", name, s.typ(), s.family.ipsetFamily(), maxElem)
			for _, fr := range sortedFrontends(s.frontends) {
				b.WriteString("add " + name + " " + frontendText(fr) + "\n")
			}
			for _, e := range sortedPrefixes(s.entries) {
				text := e.String()
				if e.IsSingleIP() {
					text = e.Addr().String()
				}
				if s.entries[e] {
					text += " nomatch"
				}
				b.WriteString("add " + name + " " + text + "\n")
			}
		}
		return []byte(b.String()), nil
	case len(args) == 2 && args[0] == "list" && args[1] == "-n":
		return []byte(strings.Join(sortedKeys(n.sets), "\n") + "\n"), nil
	case len(args) >= 1:
		return nil, n.ipsetCmd(args, exist)
	}
	return nil, fmt.Errorf("ipset: bad arguments %v", args)
}

func (n *fakeNode) ipsetCmd(f []string, exist bool) error {
	if len(f) < 2 {
		return fmt.Errorf("syntax error: %v", f)
	}
	name := f[1]
	s := n.sets[name]
	switch f[0] {
	case "create":
		fam := IPv4
		if slices.Contains(f, "inet6") {
			fam = IPv6
		}
		if s != nil {
			if exist && s.typ() == f[2] && s.family == fam {
				return nil
			}
			return fmt.Errorf("Set cannot be created: set with the same name already exists")
		}
		switch f[2] {
		case "hash:ip", "hash:net":
			n.sets[name] = newSet(fam, f[2] == "hash:net")
		case "hash:ip,port":
			n.sets[name] = newFrontendSet(fam)
		default:
			return fmt.Errorf("fake node: set type %s", f[2])
		}
	case "add", "del":
		if s == nil {
			return fmt.Errorf("The set with the given name does not exist")
		}
		if len(f) < 3 {
			return fmt.Errorf("syntax error: %v", f)
		}
		if s.ipPort {
			return frontendCmd(s, f[0], f[2], exist)
		}
		e, err := parseEntry(f[2])
		if err != nil || familyOf(e.Addr()) != s.family || (!s.net && !e.IsSingleIP()) {
			return fmt.Errorf("Syntax error: cannot parse %s", f[2])
		}
		_, have := s.entries[e]
		if f[0] == "del" {
			if !have && !exist {
				return fmt.Errorf("Element cannot be deleted from the set: it's not added")
			}
			delete(s.entries, e)
			return nil
		}
		if have && !exist {
			return fmt.Errorf("Element cannot be added to the set: it's already added")
		}
		s.entries[e] = slices.Contains(f[3:], "nomatch")
	case "flush":
		if s == nil {
			return fmt.Errorf("The set with the given name does not exist")
		}
		clear(s.entries)
		clear(s.frontends)
	case "destroy":
		if s == nil {
			if exist {
				return nil
			}
			return fmt.Errorf("The set with the given name does not exist")
		}
		if n.referenced(name) {
			return n.violate("destroy %s: Set cannot be destroyed: it is in use by a kernel component", name)
		}
		delete(n.sets, name)
	default:
		return fmt.Errorf("unknown command %s", f[0])
	}
	return nil
}

// frontendCmd adds (op "add") or deletes a member of a hash:ip,port set.
func frontendCmd(s *ipSet, op, text string, exist bool) error {
	fr, err := parseFrontend(text)
	if err != nil || familyOf(fr.Addr) != s.family {
		return fmt.Errorf("Syntax error: cannot parse %s", text)
	}
	_, have := s.frontends[fr]
	switch {
	case op == "del" && !have && !exist:
		return fmt.Errorf("Element cannot be deleted from the set: it's not added")
	case op == "del":
		delete(s.frontends, fr)
	case have && !exist:
		return fmt.Errorf("Element cannot be added to the set: it's already added")
	default:
		s.frontends[fr] = struct{}{}
	}
	return nil
}

// restore applies an iptables-restore --noflush payload as the tool does:
// each table block atomically, at its COMMIT, in order; a failing line
// leaves its block uncommitted and stops the restore, the blocks before it
// staying in force. afterCommit, when set, runs after each commit.
func (n *fakeNode) restore(m Mode, fam Family, args []string, payload string) error {
	if !slices.Contains(args, "--noflush") {
		return fmt.Errorf("fake node: restore without --noflush would flush every table")
	}
	var cur *fakeTable
	var key tableKey
	for i, line := range strings.Split(payload, "\n") {
		line = strings.TrimSpace(line)
		fail := func(format string, a ...any) error {
			return fmt.Errorf("%s: line %d failed: %s", m.RestoreTool(fam), i+1, fmt.Sprintf(format, a...))
		}
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '*':
			key = tableKey{m, fam, line[1:]}
			orig := n.table(key)
			cur = &fakeTable{policy: maps.Clone(orig.policy), chains: maps.Clone(orig.chains)}
		case cur == nil:
			return fail("outside a table")
		case line == "COMMIT":
			n.tables[key] = cur
			cur = nil
			if n.afterCommit != nil {
				n.afterCommit(key)
			}
		case line[0] == ':':
			fields := strings.Fields(line[1:])
			if _, builtin := cur.policy[fields[0]]; builtin {
				if fields[1] != "-" {
					cur.policy[fields[0]] = fields[1]
				}
				continue
			}
			cur.chains[fields[0]] = nil // create, or flush
		default:
			if err := n.ruleCmd(cur, fam, line); err != nil {
				return fail("%v", err)
			}
		}
	}
	if cur != nil {
		return fmt.Errorf("%s: COMMIT expected at the end of table %s", m.RestoreTool(fam), key.table)
	}
	return nil
}

func (n *fakeNode) ruleCmd(t *fakeTable, fam Family, line string) error {
	op, rest, _ := strings.Cut(line, " ")
	chain, rule, _ := strings.Cut(rest, " ")
	rules, ok := t.chains[chain]
	if !ok {
		return fmt.Errorf("chain '%s' does not exist", chain)
	}
	switch op {
	case "-F":
		t.chains[chain] = nil
		return nil
	case "-X":
		if _, builtin := t.policy[chain]; builtin {
			return fmt.Errorf("cannot delete built-in chain %s", chain)
		}
		if len(rules) > 0 {
			return fmt.Errorf("chain %s not empty", chain)
		}
		for c, rs := range t.chains {
			for _, r := range rs {
				if ruleTarget(strings.Fields(r)) == chain {
					return fmt.Errorf("chain %s is referenced by %s", chain, c)
				}
			}
		}
		delete(t.chains, chain)
		return nil
	case "-D":
		i := slices.Index(rules, rule)
		if i < 0 {
			return fmt.Errorf("rule %q not found in %s", rule, chain)
		}
		t.chains[chain] = slices.Delete(slices.Clone(rules), i, i+1)
		return nil
	case "-A", "-I":
	default:
		return fmt.Errorf("unknown command %s", op)
	}
	pos := len(rules)
	if op == "-I" {
		pos = 0
		if num, r, ok := strings.Cut(rule, " "); ok {
			if p, err := strconv.Atoi(num); err == nil {
				pos, rule = p-1, r
			}
		}
	}
	target := ruleTarget(strings.Fields(rule))
	if _, ok := t.chains[target]; !ok && isLockstepChain(target) {
		return fmt.Errorf("couldn't load target `%s'", target)
	}
	for _, s := range setRefs(rule) {
		set := n.sets[s]
		if set == nil {
			return n.violate("rule %q: Set %s doesn't exist", rule, s)
		}
		if set.family != fam {
			return n.violate("rule %q: set %s is %s, the rule %s", rule, s, set.family, fam)
		}
	}
	t.chains[chain] = slices.Insert(slices.Clone(rules), pos, rule)
	return nil
}

// save prints the tables of m and f as iptables-save does: all of them,
// or the one -t names.
func (n *fakeNode) save(m Mode, fam Family, args []string) ([]byte, error) {
	only := ""
	if len(args) == 2 && args[0] == "-t" {
		only = args[1]
		n.table(tableKey{m, fam, only})
	}
	var names []string
	for k := range n.tables {
		if k.mode == m && k.fam == fam && (only == "" || k.table == only) {
			names = append(names, k.table)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("# Generated by fake\n")
	for _, name := range names {
		t := n.tables[tableKey{m, fam, name}]
		b.WriteString("*" + name + "\n")
		order := builtins(name)
		for _, c := range order {
			b.WriteString(":" + c + " " + t.policy[c] + " [0:0]\n")
		}
		var user []string
		for c := range t.chains {
			if _, builtin := t.policy[c]; !builtin {
				user = append(user, c)
			}
		}
		slices.Sort(user)
		for _, c := range user {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, c := range append(order, user...) {
			for _, r := range t.chains[c] {
				b.WriteString("-A " + c + " " + r + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String()), nil
}

// lockstepView is the part of a node that is lockstep's in one mode:
// chains by family, the jumps into them, the Service chains of the nat
// table and the jumps into them, and the mode's sets with their members
// as ipset writes them (and whether nomatch).
type lockstepView struct {
	chains   [2]map[string][]string
	jumps    [2][]string
	nat      [2]map[string][]string
	natJumps [2][]string
	sets     map[string]map[string]bool
}

func (n *fakeNode) view(m Mode) lockstepView {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := lockstepView{sets: map[string]map[string]bool{}}
	for _, f := range families {
		v.chains[f.index()], v.jumps[f.index()] = tableView(n.tables[tableKey{m, f, "filter"}], isLockstepChain)
		v.nat[f.index()], v.natJumps[f.index()] = tableView(n.tables[tableKey{m, f, "nat"}], isServiceChain)
	}
	for name, s := range n.sets {
		if isModeSet(m, name) {
			v.sets[name] = setMembers(s)
		}
	}
	return v
}

// tableView is the chains of t that ours reports, and the rules of other
// chains jumping into them ("CHAIN RULE"), sorted.
func tableView(t *fakeTable, ours func(string) bool) (map[string][]string, []string) {
	chains := map[string][]string{}
	var jumps []string
	if t == nil {
		return chains, nil
	}
	for c, rules := range t.chains {
		if ours(c) {
			chains[c] = slices.Clone(rules)
			continue
		}
		for _, r := range rules {
			if ours(ruleTarget(strings.Fields(r))) {
				jumps = append(jumps, c+" "+r)
			}
		}
	}
	slices.Sort(jumps)
	return chains, jumps
}

// setMembers is a set's members as ipset restore writes them, each with
// its nomatch flag.
func setMembers(s *ipSet) map[string]bool {
	out := make(map[string]bool, s.size())
	for e, nomatch := range s.entries {
		out[entryText(s, e)] = nomatch
	}
	for fr := range s.frontends {
		out[frontendText(fr)] = false
	}
	return out
}

func (n *fakeNode) takeCalls() []fakeCall {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.calls
	n.calls = nil
	return c
}
