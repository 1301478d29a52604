package agent

import (
	"context"
	"errors"
	"log/slog"
)

// openIptables loads the iptables/ipset dataplane. NOT WIRED YET: the
// backend is being written in agent/iptables.
func openIptables(context.Context, *slog.Logger) (*backend, error) {
	return nil, errors.New("run agent: --dataplane iptables is not wired yet")
}

// iptablesResidues lists the iptables backends lockstep can clean.
func iptablesResidues() map[string]residue { return nil }
