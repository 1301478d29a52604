package masquerade

import (
	"context"
	"errors"
	"fmt"

	"lockstep.dev/lockstep/agent/iptables"
)

// Change is what Sync or Remove changed in one family.
type Change struct {
	Family iptables.Family
	// Action is "installed" (the chain was missing), "updated" (its rules
	// or its jump differed) or "removed".
	Action string
	// Rules is how many rules the chain holds now.
	Rules int
}

// String reads like a log line: "IPv4 updated (3 rules)".
func (c Change) String() string {
	if c.Action == "removed" {
		return c.Family.String() + " removed"
	}
	return fmt.Sprintf("%s %s (%d rules)", c.Family, c.Action, c.Rules)
}

var families = [...]iptables.Family{iptables.IPv4, iptables.IPv6}

// Sync makes mode m's nat tables masquerade as c says, in both families,
// and returns what it changed. It reads each family's chain first and
// writes only a family that differs (one iptables-restore commit), so a
// periodic Sync is two iptables-save runs when nothing drifted, and it
// repairs whatever did: a deleted jump, an edited or flushed chain. A
// family without sources ends with neither chain nor jump.
func Sync(ctx context.Context, r iptables.Runner, m iptables.Mode, c Config) ([]Change, error) {
	var changes []Change
	var errs []error
	for _, f := range families {
		ch, err := syncFamily(ctx, r, m, f, Rules(c, f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ch != nil {
			changes = append(changes, *ch)
		}
	}
	return changes, errors.Join(errs...)
}

// Remove deletes the masquerade chain and every jump to it from mode m,
// both families, and returns what it removed. It is idempotent.
func Remove(ctx context.Context, r iptables.Runner, m iptables.Mode) ([]Change, error) {
	var changes []Change
	var errs []error
	for _, f := range families {
		ch, err := syncFamily(ctx, r, m, f, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ch != nil {
			changes = append(changes, *ch)
		}
	}
	return changes, errors.Join(errs...)
}

// syncFamily makes the chain of family f hold want (nil: removed).
func syncFamily(ctx context.Context, r iptables.Runner, m iptables.Mode, f iptables.Family, want []string) (*Change, error) {
	// Reading the nat table by name creates it in legacy mode; a removal
	// reads every table instead, so a node without NAT stays without.
	var args []string
	if want != nil {
		args = []string{"-t", table}
	}
	out, err := r.Run(ctx, m.SaveTool(f), args, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s masquerade rules in %s: %w", f, m, err)
	}
	cur, err := iptables.ParseChain(out, table, ChainName)
	if err != nil {
		return nil, fmt.Errorf("read %s masquerade rules in %s: %w", f, m, err)
	}
	payload := plan(cur, want)
	if payload == nil {
		return nil, nil
	}
	if err := iptables.Restore(ctx, r, m, f, payload); err != nil {
		return nil, fmt.Errorf("write %s masquerade rules in %s: %w", f, m, err)
	}
	ch := &Change{Family: f, Action: "updated", Rules: len(want)}
	switch {
	case want == nil:
		ch.Action = "removed"
	case !cur.Exists:
		ch.Action = "installed"
	}
	return ch, nil
}
