package plugin

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// del removes an attachment. It is idempotent: a link already gone, a
// namespace already gone and an agent with no record all succeed. It fails
// only when the link cannot be removed or the agent cannot be asked, and
// the runtime retries DEL until it succeeds.
func (p *plugin) del(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	att := api.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	hostIf := api.HostIfName(att.ContainerID, att.IfName)

	// Unwire before releasing, so the address is never free while a route
	// still points it at this pod.
	if err := p.teardown(hostIf); err != nil {
		return kernelError("the address stays reserved until DEL succeeds; the runtime retries DEL",
			"remove pod network of %s/%s: %v", att.ContainerID, att.IfName, err)
	}
	resp, err := p.agent(conf.Socket).Del(ctx, att)
	if err != nil {
		return agentError(err)
	}
	if !resp.Found {
		return nil
	}
	// The agent waits for an ADD of the same attachment still in flight
	// before releasing; that ADD may have wired the pod after the first
	// teardown above.
	names := []string{hostIf}
	if resp.HostIfName != "" && resp.HostIfName != hostIf {
		names = append(names, resp.HostIfName)
	}
	for _, name := range names {
		if err := p.teardown(name); err != nil {
			return kernelError("the address was released; the runtime retries DEL to remove the interface",
				"remove pod network of %s/%s: %v", att.ContainerID, att.IfName, err)
		}
	}
	return nil
}
