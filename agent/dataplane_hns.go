package agent

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"

	"lockstep.dev/lockstep/agent/hns"
)

// DefaultHNSNetwork is the HNS network the hns dataplane programs.
const DefaultHNSNetwork = "lockstep"

// openHNS loads the Windows HNS dataplane on the network cfg names. On
// other systems hns.NewClient fails with errors.ErrUnsupported.
func openHNS(_ context.Context, cfg Config, _ *slog.Logger) (*backend, error) {
	network := cfg.HNSNetwork
	if network == "" {
		network = DefaultHNSNetwork
	}
	c, err := hns.NewClient(network)
	if err != nil {
		return nil, fmt.Errorf("run agent with --dataplane hns on %s: %w (use ebpf or iptables on Linux)", runtime.GOOS, err)
	}
	return &backend{name: DataplaneHNS, dp: hns.New(c)}, nil
}
