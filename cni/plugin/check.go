package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// checkDetails tells the operator what to do about drift CHECK found.
const checkDetails = "something changed the pod's network after lockstep wired it; recreate the pod sandbox to rewire it"

// checkCmd has the agent compare its record of the attachment with the
// kernel, the pod side read through the namespace the plugin passes, and
// compares the record with the prevResult the runtime kept from ADD.
func (p *plugin) checkCmd(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	netns, err := p.openNetnsOrNone(args.Netns)
	if err != nil {
		return netnsError(args.Netns, err)
	}
	if netns != nil {
		defer netns.Close()
	}
	att := api.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	resp, err := p.agent(conf.Socket).CNICheck(ctx, api.CNICheckRequest{Attachment: att, Netns: args.Netns}, netns)
	if err != nil {
		return agentError(err)
	}
	ep := resp.Endpoint
	addrs := make([]netip.Prefix, 0, len(ep.Addresses))
	for _, a := range ep.Addresses {
		addrs = append(addrs, a.Address)
	}
	var diffs []string
	if ep.Netns != "" && ep.Netns != args.Netns {
		diffs = append(diffs, fmt.Sprintf("agent recorded netns %s, the runtime names %s", ep.Netns, args.Netns))
	}
	diffs = append(diffs, resp.Diffs...)
	if conf.PrevResult != nil {
		prevDiffs, err := checkPrevResult(conf.PrevResult, args, addrs)
		if err != nil {
			return &types.Error{Code: types.ErrDecodingFailure, Msg: fmt.Sprintf("read prevResult: %v", err), Details: "the runtime's cached ADD result is unreadable"}
		}
		diffs = append(diffs, prevDiffs...)
	}
	if len(diffs) > 0 {
		return &types.Error{
			Code:    api.CodeCheckFailed,
			Msg:     fmt.Sprintf("check %s/%s: %s", att.ContainerID, att.IfName, strings.Join(diffs, "; ")),
			Details: checkDetails,
		}
	}
	return nil
}

// checkPrevResult verifies that the result the runtime kept from ADD lists
// the pod interface and every address the agent holds for it.
func checkPrevResult(prev types.Result, args *skel.CmdArgs, addrs []netip.Prefix) ([]string, error) {
	res, err := types100.NewResultFromResult(prev)
	if err != nil {
		return nil, err
	}
	podIndex := -1
	for i, iface := range res.Interfaces {
		if iface.Name == args.IfName && iface.Sandbox != "" {
			podIndex = i
		}
	}
	if podIndex < 0 {
		return []string{fmt.Sprintf("prevResult lists no interface %s inside a sandbox", args.IfName)}, nil
	}
	if sandbox := res.Interfaces[podIndex].Sandbox; sandbox != args.Netns {
		return []string{fmt.Sprintf("prevResult puts interface %s in %s, the runtime names %s", args.IfName, sandbox, args.Netns)}, nil
	}
	var diffs []string
	for _, want := range addrs {
		found := false
		for _, ip := range res.IPs {
			got, ok := netip.AddrFromSlice(ip.Address.IP)
			if ok && got.Unmap() == want.Addr() && ip.Interface != nil && *ip.Interface == podIndex {
				found = true
				break
			}
		}
		if !found {
			diffs = append(diffs, fmt.Sprintf("prevResult lacks address %s on interface %s", want.Addr(), args.IfName))
		}
	}
	return diffs, nil
}

// openNetnsOrNone opens CNI_NETNS for CHECK: nil when it no longer
// exists, which the agent reports as a difference.
func (p *plugin) openNetnsOrNone(path string) (*os.File, error) {
	f, err := p.openNetns(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return f, err
}
