package iptables

import (
	"context"
	"strings"
)

// Restore commits payload with mode m's iptables-restore for family f,
// with --noflush (tables and chains the payload does not name are left
// alone) and waiting up to 5 s for the xtables lock. Other parts of
// lockstep that keep their own chains (agent/masquerade) write them
// through it too, so every writer waits for the lock the same way.
func Restore(ctx context.Context, r Runner, m Mode, f Family, payload []byte) error {
	_, err := r.Run(ctx, m.RestoreTool(f), restoreArgs, payload)
	return err
}

// Chain is one chain of a table as iptables-save prints it.
type Chain struct {
	// Exists reports whether the table declares the chain.
	Exists bool
	// Rules are the chain's rules in order, as "-A CHAIN ..." lines.
	Rules []string
	// Jumps are the rules of other chains of the table that jump (-j) or
	// go (-g) to the chain, as "-A OTHER ... -j CHAIN" lines.
	Jumps []string
}

// ParseChain finds chain of table in dump, the output of an iptables-save
// (of one table or all). A table or chain dump lacks is a Chain that does
// not exist.
func ParseChain(dump []byte, table, chain string) (Chain, error) {
	tables, err := parseSave(dump)
	if err != nil {
		return Chain{}, err
	}
	t := tables[table]
	if t == nil {
		return Chain{}, nil
	}
	var c Chain
	for _, name := range t.chains {
		if name == chain {
			c.Exists = true
		}
	}
	for _, line := range t.lines {
		fields := strings.Fields(line)
		switch {
		case fields[1] == chain:
			c.Rules = append(c.Rules, line)
		case ruleTarget(fields) == chain:
			c.Jumps = append(c.Jumps, line)
		}
	}
	return c, nil
}
