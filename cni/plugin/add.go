package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
)

// add asks the agent to connect the pod, passing it the pod's network
// namespace open, and prints the result. The agent reserves, wires,
// attaches and puts the pod's policy in force before it answers, and
// undoes all of it when a step fails; the plugin's part is what the
// runtime sees: validation, error codes and the result.
func (p *plugin) add(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	pod, err := config.ParseArgs(args.Args)
	if err != nil {
		return err
	}
	// Read a chained prevResult before the pod is connected: once it is,
	// nothing may fail for a reason known now.
	prev, err := prevResult(conf)
	if err != nil {
		return err
	}
	netns, err := p.openNetns(args.Netns)
	if err != nil {
		return netnsError(args.Netns, err)
	}
	defer netns.Close()

	att := api.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	client := p.agent(conf.Socket)
	resp, err := client.CNIAdd(ctx, api.CNIAddRequest{Attachment: att, Netns: args.Netns, Pod: pod, MTU: conf.MTU}, netns)
	if err != nil {
		return agentError(err)
	}
	result, err := buildResult(conf, prev, args.Netns, resp)
	if err == nil {
		err = result.PrintTo(p.stdout)
	}
	if err != nil {
		// The pod is connected and the runtime will not know it: undo it
		// now rather than leave it to the runtime's DEL.
		cause := &types.Error{Code: types.ErrIOFailure, Msg: fmt.Sprintf("write CNI %s result: %v", conf.CNIVersion, err)}
		if _, delErr := client.CNIDel(context.WithoutCancel(ctx), att); delErr != nil {
			addDetail(cause, fmt.Sprintf("the pod is connected (%v); the runtime's DEL removes it", delErr))
		} else {
			addDetail(cause, "the pod was disconnected again; the runtime retries ADD")
		}
		return cause
	}
	return nil
}

// netnsError reports a CNI_NETNS the plugin cannot open, CNI code 8.
func netnsError(path string, err error) *types.Error {
	details := "pass the pod sandbox's network namespace"
	if errors.Is(err, fs.ErrNotExist) {
		details = "the pod sandbox's network namespace is gone; the runtime recreates the sandbox"
	}
	return &types.Error{Code: types.ErrInvalidNetNS, Msg: fmt.Sprintf("open CNI_NETNS %s: %v", path, err), Details: details}
}

// prevResult returns the result of the plugin before lockstep in a
// chain, converted to the current version, or an empty one.
func prevResult(conf *config.NetConf) (*types100.Result, error) {
	if conf.PrevResult == nil {
		return &types100.Result{}, nil
	}
	prev, err := types100.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, &types.Error{
			Code:    types.ErrDecodingFailure,
			Msg:     fmt.Sprintf("convert prevResult: %v", err),
			Details: "check the prevResult handed to lockstep by the plugin before it in the config list",
		}
	}
	return prev, nil
}

// buildResult returns the CNI result for what the agent wired, converted
// to the config's cniVersion. When lockstep runs chained, the previous
// plugin's result is kept and lockstep's interfaces and addresses are
// appended to it.
func buildResult(conf *config.NetConf, result *types100.Result, netns string, wired *api.CNIAddResponse) (types.Result, error) {
	result.CNIVersion = types100.ImplementedSpecVersion
	// Appending keeps every index the previous result uses valid; ours
	// count from where its interfaces end.
	podIndex := len(result.Interfaces) + 1
	result.Interfaces = append(result.Interfaces,
		&types100.Interface{Name: wired.HostIf.Name, Mac: wired.HostIf.MAC},
		&types100.Interface{Name: wired.PodIf.Name, Mac: wired.PodIf.MAC, Sandbox: netns},
	)
	for _, ip := range wired.IPs {
		result.IPs = append(result.IPs, &types100.IPConfig{
			Interface: types100.Int(podIndex),
			Address:   *toIPNet(ip.Address),
			Gateway:   ip.Gateway.AsSlice(),
		})
	}
	for _, r := range wired.Routes {
		result.Routes = append(result.Routes, &types.Route{Dst: *toIPNet(r.Dst), GW: r.GW.AsSlice()})
	}
	if !conf.DNS.IsEmpty() {
		result.DNS = conf.DNS
	}
	out, err := result.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return nil, fmt.Errorf("convert result to %s: %w", conf.CNIVersion, err)
	}
	return out, nil
}

// toIPNet converts p, keeping the address bits.
func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
