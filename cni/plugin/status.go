package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// status answers whether an ADD could succeed now. The runtime holds pod
// creation back on this node while it fails with code 50.
func (p *plugin) status(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	resp, err := p.agent(conf.Socket).Status(ctx)
	if err != nil {
		if unreachable := agentError(err); unreachable.Code == api.CodeTryAgainLater {
			return &types.Error{Code: types.ErrPluginNotAvailable, Msg: unreachable.Msg, Details: unreachable.Details}
		}
		return &types.Error{
			Code:    types.ErrPluginNotAvailable,
			Msg:     fmt.Sprintf("lockstep agent at %s cannot report its status: %v", conf.Socket, err),
			Details: "see the lockstep agent's log on this node",
		}
	}
	// An ADD needs one free address per configured family, from any of
	// that family's pools.
	free := map[bool]uint64{}
	var full []string
	for _, pool := range resp.Pools {
		if pool.Draining {
			continue
		}
		v6 := pool.CIDR.Addr().Is6()
		free[v6] += pool.Free
		if pool.Free == 0 {
			full = append(full, fmt.Sprintf("%s (%s)", pool.Name, pool.CIDR))
		}
	}
	if len(free) == 0 {
		return &types.Error{
			Code:    types.ErrPluginNotAvailable,
			Msg:     "lockstep agent has no pool to allocate from",
			Details: "configure an address pool that is not draining",
		}
	}
	for v6, n := range free {
		if n == 0 {
			family := "IPv4"
			if v6 {
				family = "IPv6"
			}
			return &types.Error{
				Code:    types.ErrPluginNotAvailable,
				Msg:     fmt.Sprintf("no free %s address: pool %s exhausted", family, strings.Join(full, ", pool ")),
				Details: "delete unused pods or give the agent a larger pool",
			}
		}
	}
	return nil
}
