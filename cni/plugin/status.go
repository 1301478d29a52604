package plugin

import (
	"context"
	"errors"
	"fmt"

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
		var apiErr *api.Error
		if errors.As(err, &apiErr) && apiErr.Code == api.CodeTryAgainLater {
			return &types.Error{Code: types.ErrPluginNotAvailable, Msg: apiErr.Msg, Details: apiErr.Details}
		}
		return &types.Error{
			Code:    types.ErrPluginNotAvailable,
			Msg:     fmt.Sprintf("lockstep agent at %s cannot report its status: %v", conf.Socket, err),
			Details: "see the lockstep agent's log on this node",
		}
	}
	usable := 0
	for _, pool := range resp.Pools {
		if pool.Draining {
			continue
		}
		usable++
		if pool.Free == 0 {
			return &types.Error{
				Code:    types.ErrPluginNotAvailable,
				Msg:     fmt.Sprintf("pool %s (%s) has no free address", pool.Name, pool.CIDR),
				Details: "delete unused pods or give the agent a larger pool",
			}
		}
	}
	if usable == 0 {
		return &types.Error{
			Code:    types.ErrPluginNotAvailable,
			Msg:     "lockstep agent has no pool to allocate from",
			Details: "configure an address pool that is not draining",
		}
	}
	return nil
}
