package plugin

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// gc releases every attachment the runtime no longer lists, removes their
// links, then sweeps lockstep links that no valid attachment owns — those
// an ADD left behind when it crashed between wiring and rollback.
//
// Only a failed agent call fails GC: a link that cannot be removed now is
// reported on stderr and swept again by the next GC.
func (p *plugin) gc(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	// A GC that lists nothing means nothing is valid: libcni sends no list
	// when called without GC arguments, and then DELs every attachment it
	// has cached itself.
	listed, ok := conf.GCAttachments()
	if !ok {
		fmt.Fprintln(p.stderr, "lockstep GC: no \"cni.dev/valid-attachments\" given; treating every attachment on this node as stale")
	}
	valid := make([]api.Attachment, 0, len(listed))
	keep := make(map[string]bool, len(listed))
	for _, a := range listed {
		valid = append(valid, api.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
		keep[api.HostIfName(a.ContainerID, a.IfName)] = true
	}
	resp, err := p.agent(conf.Socket).GC(ctx, api.GCRequest{Valid: valid})
	if err != nil {
		return agentError(err)
	}
	for _, name := range resp.Retained {
		keep[name] = true // valid, or an ADD still in flight
	}
	for _, ep := range resp.Released {
		p.sweep(keep, api.HostIfName(ep.ContainerID, ep.IfName))
		if ep.HostIfName != "" {
			p.sweep(keep, ep.HostIfName)
		}
	}
	links, err := p.hostLinks()
	if err != nil {
		fmt.Fprintf(p.stderr, "lockstep GC: skip sweeping host links: %v\n", err)
		return nil
	}
	for _, name := range links {
		p.sweep(keep, name)
	}
	return nil
}

// sweep removes the host link name unless a valid attachment owns it.
func (p *plugin) sweep(keep map[string]bool, name string) {
	if keep[name] {
		return
	}
	if err := p.teardown(name); err != nil {
		fmt.Fprintf(p.stderr, "lockstep GC: %v; the next GC retries\n", err)
	}
}
