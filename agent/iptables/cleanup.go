package iptables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// ChainRef names a lockstep chain in a table.
type ChainRef struct {
	Family Family
	Table  string
	Chain  string
}

// JumpRef is a rule of a chain that is not lockstep's (a built-in one,
// normally) jumping into a lockstep chain.
type JumpRef struct {
	Family Family
	Table  string
	// Rule is the rule as iptables-save prints it ("-A FORWARD ... -j
	// LOCKSTEP-FORWARD").
	Rule string
}

// Leftovers is what lockstep has in one iptables mode: the jumps into its
// chains, the chains, and the ipsets named for that mode.
type Leftovers struct {
	Mode   Mode
	Jumps  []JumpRef
	Chains []ChainRef
	Sets   []string
}

// HasRules reports whether jumps or chains remain.
func (l Leftovers) HasRules() bool { return len(l.Jumps) > 0 || len(l.Chains) > 0 }

// Empty reports whether nothing of lockstep's remains in the mode.
func (l Leftovers) Empty() bool { return !l.HasRules() && len(l.Sets) == 0 }

// String summarises l, e.g. "iptables-legacy: 3 jumps, 7 chains, 2 ipsets".
func (l Leftovers) String() string {
	return fmt.Sprintf("%s: %d jumps, %d chains, %d ipsets", l.Mode, len(l.Jumps), len(l.Chains), len(l.Sets))
}

// ListLeftovers lists what lockstep has in mode m: every table of both
// families (read with m's own iptables-save) and the ipsets named for m.
// The chains in keep, and the jumps into them, are not listed: lockstep
// chains that another part of lockstep still uses in mode m (the
// masquerade chain of agent/masquerade while an eBPF agent masquerades
// with m's tools) are not leftovers.
func ListLeftovers(ctx context.Context, r Runner, m Mode, keep ...ChainRef) (Leftovers, error) {
	if !m.valid() {
		return Leftovers{}, fmt.Errorf("list lockstep leftovers: %w %d", ErrUnknownMode, m)
	}
	l := Leftovers{Mode: m}
	for _, f := range families {
		tables, err := saveAll(ctx, r, m, f)
		if err != nil {
			return l, fmt.Errorf("list lockstep leftovers in %s: %w", m, err)
		}
		for _, name := range sortedKeys(tables) {
			chains, foreign := lockstepInExcept(tables[name], kept(keep, f, name))
			for _, rule := range foreign {
				l.Jumps = append(l.Jumps, JumpRef{Family: f, Table: name, Rule: rule})
			}
			for _, c := range sortedKeys(chains) {
				l.Chains = append(l.Chains, ChainRef{Family: f, Table: name, Chain: c})
			}
		}
	}
	sets, err := listSets(ctx, r, m)
	if err != nil {
		return l, fmt.Errorf("list lockstep leftovers in %s: %w", m, err)
	}
	l.Sets = sets
	return l, nil
}

// Cleanup removes lockstep's rules from mode m with m's own tools: in one
// iptables-restore --noflush commit per family, it flushes every lockstep
// chain, deletes every jump into them from other chains, and deletes the
// chains. What it removes is read from the tables first, so it is
// idempotent and finishes a clean-up that stopped half-way (jumps gone but
// chains left, chains flushed but not deleted, one family done...). A
// commit is atomic: a failed attempt leaves its family as it was.
//
// Cleanup leaves ipsets alone (DestroySets removes them) and the chains in
// keep with the jumps into them (see ListLeftovers), and returns what is
// left afterwards, sets included. It removes the rules of a live Dataplane
// of mode m just as well: run it only for a mode lockstep has stopped
// using.
func Cleanup(ctx context.Context, r Runner, m Mode, keep ...ChainRef) (Leftovers, error) {
	if !m.valid() {
		return Leftovers{}, fmt.Errorf("clean up lockstep rules: %w %d", ErrUnknownMode, m)
	}
	var errs []error
	for _, f := range families {
		tables, err := saveAll(ctx, r, m, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("clean up lockstep %s rules in %s: %w", f, m, err))
			continue
		}
		payload := cleanupPayload(tables, func(table string) func(string) bool { return kept(keep, f, table) })
		if payload == nil {
			continue
		}
		if err := Restore(ctx, r, m, f, payload); err != nil {
			errs = append(errs, fmt.Errorf("clean up lockstep %s rules in %s: %w", f, m, err))
		}
	}
	l, err := ListLeftovers(ctx, r, m, keep...)
	if err != nil {
		errs = append(errs, err)
	}
	return l, errors.Join(errs...)
}

// cleanupPayload is the restore payload removing lockstep from tables: per
// table, flush the chains (a redeclared chain is flushed), delete the
// jumps, then delete the chains (nf_tables refuses to delete a chain that
// is still jumped to, even within the commit that deletes the jump).
// keep(table) says which chains of a table to leave alone.
func cleanupPayload(tables map[string]*savedTable, keep func(table string) func(chain string) bool) []byte {
	var b strings.Builder
	for _, name := range sortedKeys(tables) {
		chains, foreign := lockstepInExcept(tables[name], keep(name))
		if len(chains) == 0 && len(foreign) == 0 {
			continue
		}
		names := sortedKeys(chains)
		b.WriteString("*" + name + "\n")
		for _, c := range names {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, rule := range foreign {
			b.WriteString("-D" + strings.TrimPrefix(rule, "-A") + "\n")
		}
		for _, c := range names {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	if b.Len() == 0 {
		return nil
	}
	return []byte(b.String())
}

// DestroySets destroys the ipsets named for mode m. It refuses, with
// ErrRulesRemain, while lockstep rules of m other than the chains in keep
// remain (a kept chain must reference no lockstep set); rules of other modes
// never reference m's sets (the mode is in the name), and the kernel
// refuses to destroy a set any rule references, whoever wrote it: such a
// set is reported and the others are destroyed. It is idempotent.
func DestroySets(ctx context.Context, r Runner, m Mode, keep ...ChainRef) error {
	l, err := ListLeftovers(ctx, r, m, keep...)
	if err != nil {
		return fmt.Errorf("destroy lockstep ipsets: %w", err)
	}
	if l.HasRules() {
		return fmt.Errorf("destroy lockstep ipsets of %s: %w (%s; run Cleanup first)", m, ErrRulesRemain, l)
	}
	if len(l.Sets) == 0 {
		return nil
	}
	var b strings.Builder
	for _, s := range l.Sets {
		b.WriteString("destroy " + s + "\n")
	}
	if _, err := r.Run(ctx, ipsetTool, []string{"-exist", "restore"}, []byte(b.String())); err == nil {
		return nil
	}
	// ipset restore stops at the first failure: destroy one at a time to
	// remove all that can go and name those that cannot.
	var errs []error
	for _, s := range l.Sets {
		if _, err := r.Run(ctx, ipsetTool, []string{"-exist", "destroy", s}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy lockstep ipsets of %s: %w", m, err)
	}
	return nil
}

// Purge removes everything lockstep has in mode m but the chains in keep,
// rules then sets, and returns nil only when nothing else is left: the
// whole clean-up of a mode lockstep no longer uses for policy, for a
// caller that retries it until it succeeds.
func Purge(ctx context.Context, r Runner, m Mode, keep ...ChainRef) (Leftovers, error) {
	l, err := Cleanup(ctx, r, m, keep...)
	if err != nil {
		return l, err
	}
	if err := DestroySets(ctx, r, m, keep...); err != nil {
		return l, err
	}
	if l, err = ListLeftovers(ctx, r, m, keep...); err != nil {
		return l, err
	}
	if !l.Empty() {
		return l, fmt.Errorf("purge lockstep from %s: still left: %s", m, l)
	}
	return l, nil
}

// saveAll reads every table of family f with m's iptables-save (no -t:
// naming a table would create it in legacy mode).
func saveAll(ctx context.Context, r Runner, m Mode, f Family) (map[string]*savedTable, error) {
	out, err := r.Run(ctx, m.SaveTool(f), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	return parseSave(out)
}

// kept returns whether a chain of table in family f is one of keep.
func kept(keep []ChainRef, f Family, table string) func(chain string) bool {
	return func(chain string) bool { return slices.Contains(keep, ChainRef{Family: f, Table: table, Chain: chain}) }
}

// listSets lists the ipsets named for mode m, sorted. A node without the
// ipset tool has none: lockstep creates its sets with that tool only.
func listSets(ctx context.Context, r Runner, m Mode) ([]string, error) {
	out, err := r.Run(ctx, ipsetTool, []string{"list", "-n"}, nil)
	if errors.Is(err, exec.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list ipsets: %w", err)
	}
	var sets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name := strings.TrimSpace(sc.Text()); isModeSet(m, name) {
			sets = append(sets, name)
		}
	}
	slices.Sort(sets)
	return sets, sc.Err()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
