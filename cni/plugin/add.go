package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	cnins "github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/config"
	"lockstep.dev/lockstep/cni/netsetup"
)

// add reserves addresses, wires the pod and confirms, rolling back
// everything after the reservation when a later step fails.
func (p *plugin) add(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := config.ParseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	pod, err := config.ParseArgs(args.Args)
	if err != nil {
		return err
	}
	// skel rejects a CNI_NETNS that is the plugin's own namespace only
	// after ADD returns; refuse before wiring anything into the host.
	if own, nsErr := cnins.CheckNetNS(args.Netns); nsErr != nil {
		return nsErr
	} else if own {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("CNI_NETNS %s is the node's own network namespace", args.Netns),
			"pass the pod sandbox's network namespace")
	}
	att := api.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	client := p.agent(conf.Socket)
	resp, err := client.Add(ctx, api.AddRequest{Attachment: att, Netns: args.Netns, Pod: pod})
	if err != nil {
		return agentError(err)
	}
	op := api.OpRequest{Attachment: att, OpID: resp.OpID}
	hostIf := api.HostIfName(att.ContainerID, att.IfName)

	if resp.HostIfName != "" && resp.HostIfName != hostIf {
		return p.rollback(client, op, hostIf, &types.Error{
			Code:    api.CodeInternal,
			Msg:     fmt.Sprintf("agent recorded host interface %s for %s/%s, the plugin derives %s", resp.HostIfName, att.ContainerID, att.IfName, hostIf),
			Details: "the agent and the plugin on this node are different lockstep versions; upgrade them together",
		})
	}
	addrs := prefixesOf(resp.Addresses)
	wired, err := p.setup(ctx, netsetup.SetupArgs{
		Netns:     args.Netns,
		HostIf:    hostIf,
		PodIf:     args.IfName,
		MTU:       conf.MTU,
		Addresses: addrs,
	})
	if err != nil {
		details := "the address reservation was rolled back; the runtime retries ADD"
		if errors.Is(err, netsetup.ErrRouteTaken) {
			details = "a pod that was never deleted still holds the address on this node; find it with `ip route get ADDRESS`, then " + details
		}
		return p.rollback(client, op, hostIf, kernelError(details, "wire pod network for %s/%s: %v", att.ContainerID, att.IfName, err))
	}

	// Build the result before confirming: once confirmed, the pod counts
	// as wired, so nothing after Confirm may fail for a reason known now.
	result, err := buildResult(conf, wired)
	if err != nil {
		return p.rollback(client, op, hostIf, &types.Error{
			Code:    types.ErrDecodingFailure,
			Msg:     fmt.Sprintf("build CNI %s result: %v", conf.CNIVersion, err),
			Details: "check the prevResult handed to lockstep by the plugin before it in the config list",
		})
	}
	if err := client.Confirm(ctx, op); err != nil {
		return p.rollback(client, op, hostIf, agentError(err))
	}
	if err := result.PrintTo(p.stdout); err != nil {
		return kernelError("the pod is wired; the runtime's DEL removes it", "write CNI result: %v", err)
	}
	return nil
}

// rollback undoes an ADD after the reservation: first the wiring, so no
// route outlives its address, then the reservation. Both are best effort;
// what failed is added to cause, which is returned.
func (p *plugin) rollback(client agentClient, op api.OpRequest, hostIf string, cause *types.Error) *types.Error {
	if err := p.teardown(hostIf); err != nil {
		addDetail(cause, fmt.Sprintf("rollback could not remove the wiring (%v); the runtime's DEL removes it", err))
	}
	if err := client.Abort(context.Background(), op); err != nil {
		addDetail(cause, fmt.Sprintf("rollback could not abort the reservation (%v); the agent drops it at its deadline or on DEL", err))
	}
	return cause
}

// buildResult returns the CNI result for wired, converted to the config's
// cniVersion. When lockstep runs chained, the previous plugin's result is
// kept and lockstep's interfaces and addresses are appended to it.
func buildResult(conf *config.NetConf, wired *netsetup.Wired) (types.Result, error) {
	result := &types100.Result{}
	if conf.PrevResult != nil {
		prev, err := types100.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("convert prevResult: %w", err)
		}
		result = prev
	}
	result.CNIVersion = types100.ImplementedSpecVersion

	// Appending keeps every index the previous result uses valid; ours
	// count from where its interfaces end.
	podIndex := len(result.Interfaces) + 1
	result.Interfaces = append(result.Interfaces,
		&types100.Interface{Name: wired.Host.Name, Mac: wired.Host.MAC.String()},
		&types100.Interface{Name: wired.Pod.Name, Mac: wired.Pod.MAC.String(), Sandbox: wired.Netns},
	)
	var v4, v6 bool
	for _, p := range wired.Addresses {
		gw := netsetup.GatewayV4
		if p.Addr().Is6() {
			gw, v6 = netsetup.GatewayV6, true
		} else {
			v4 = true
		}
		result.IPs = append(result.IPs, &types100.IPConfig{
			Interface: types100.Int(podIndex),
			Address:   *toIPNet(p),
			Gateway:   gw.AsSlice(),
		})
	}
	if v4 {
		result.Routes = append(result.Routes, &types.Route{Dst: *toIPNet(netip.MustParsePrefix("0.0.0.0/0")), GW: netsetup.GatewayV4.AsSlice()})
	}
	if v6 {
		result.Routes = append(result.Routes, &types.Route{Dst: *toIPNet(netip.MustParsePrefix("::/0")), GW: netsetup.GatewayV6.AsSlice()})
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

// prefixesOf returns the prefixes of the agent's addresses.
func prefixesOf(addrs []api.Address) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Address)
	}
	return out
}
