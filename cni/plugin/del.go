package plugin

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// del asks the agent to disconnect an attachment: it deletes the host
// link (the pod end goes with it, so the namespace is not needed),
// releases the addresses, and deletes the link again if an ADD in flight
// wired it meanwhile. It is idempotent: a link already gone, a namespace
// already gone and an agent with no record all succeed. It fails when
// the link cannot be removed or the agent cannot be asked, and the
// runtime retries DEL until it succeeds.
func (p *plugin) del(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	att := api.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	if _, err := p.agent(conf.Socket).CNIDel(ctx, att); err != nil {
		return agentError(err)
	}
	return nil
}
