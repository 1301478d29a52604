package podnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/netsetup"
)

// rollbackTimeout bounds undoing a failed ADD. It runs even when the
// ADD's own deadline has passed, since an ADD that failed for want of time
// must still give its reservation back.
const rollbackTimeout = 2 * time.Second

// Endpoints is the address and record keeping of the agent;
// *endpoints.Service implements it.
type Endpoints interface {
	Add(context.Context, api.AddRequest) (*api.AddResponse, error)
	Confirm(context.Context, api.OpRequest) error
	Abort(context.Context, api.OpRequest) error
	Del(context.Context, api.Attachment) (*api.DelResponse, error)
	Get(context.Context, api.Attachment) (*api.Endpoint, error)
}

// Handler serves the CNI operations of the agent API (server.Backend's
// CNIAdd, CNIDel and CNICheck).
type Handler struct {
	eps      Endpoints
	setup    func(context.Context, netsetup.SetupArgs) (*netsetup.Wired, error)
	teardown func(hostIf string) error
	check    func(context.Context, netsetup.CheckArgs) error
}

// New returns a Handler that keeps records in eps and wires the node's
// network namespace, the one the agent runs in.
func New(eps Endpoints) *Handler {
	return &Handler{eps: eps, setup: netsetup.Setup, teardown: netsetup.Teardown, check: netsetup.Check}
}

// CNIAdd reserves addresses for an attachment, wires it into netns,
// confirms it (the endpoint is attached and its policy in force) and
// returns what was wired. Past the reservation, a failure tears the
// wiring down and aborts the reservation before the error is returned.
func (h *Handler) CNIAdd(ctx context.Context, req api.CNIAddRequest, netns *os.File) (*api.CNIAddResponse, error) {
	if netns == nil {
		return nil, api.Errorf(api.CodeInvalidNetNS, "ADD of %s/%s came without its pod's network namespace", req.ContainerID, req.IfName)
	}
	att := req.Attachment
	resp, err := h.eps.Add(ctx, api.AddRequest{Attachment: att, Netns: req.Netns, Pod: req.Pod})
	if err != nil {
		return nil, err
	}
	op := api.OpRequest{Attachment: att, OpID: resp.OpID}
	hostIf := api.HostIfName(att.ContainerID, att.IfName)
	addrs := make([]netip.Prefix, 0, len(resp.Addresses))
	for _, a := range resp.Addresses {
		addrs = append(addrs, a.Address)
	}
	wired, err := h.setup(ctx, netsetup.SetupArgs{Netns: netns, HostIf: hostIf, PodIf: att.IfName, MTU: req.MTU, Addresses: addrs})
	if err != nil {
		details := "the address reservation was rolled back; the runtime retries ADD"
		if errors.Is(err, netsetup.ErrRouteTaken) {
			details = "a pod that was never deleted still holds the address on this node; find it with `ip route get ADDRESS`, then " + details
		}
		return nil, h.rollback(ctx, op, hostIf, &api.Error{
			Code:    setupCode(err),
			Msg:     fmt.Sprintf("wire pod network for %s/%s: %v", att.ContainerID, att.IfName, err),
			Details: details,
		})
	}
	if err := h.eps.Confirm(ctx, op); err != nil {
		return nil, h.rollback(ctx, op, hostIf, asAPIError(err))
	}
	return result(wired, resp.Addresses), nil
}

// setupCode is the CNI code of a failed Setup: 7 for arguments the
// config got wrong, 11 when the request's time ran out (the runtime
// retries), 5 for what the kernel refused.
func setupCode(err error) uint {
	switch {
	case errors.Is(err, netsetup.ErrInvalidArgs):
		return api.CodeInvalidConfig
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return api.CodeTryAgainLater
	}
	return api.CodeIOFailure
}

// rollback undoes an ADD after the reservation: first the wiring, so no
// route outlives its address, then the reservation. Both are best effort;
// what failed is added to cause, which is returned.
func (h *Handler) rollback(ctx context.Context, op api.OpRequest, hostIf string, cause *api.Error) *api.Error {
	if err := h.teardown(hostIf); err != nil {
		addDetail(cause, fmt.Sprintf("rollback could not remove the wiring (%v); the runtime's DEL removes it", err))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := h.eps.Abort(ctx, op); err != nil {
		addDetail(cause, fmt.Sprintf("rollback could not abort the reservation (%v); the agent drops it at its deadline or on DEL", err))
	}
	return cause
}

// result is the answer to an ADD: the two ends, each address with its
// gateway, and a default route per family.
func result(wired *netsetup.Wired, pooled []api.Address) *api.CNIAddResponse {
	out := &api.CNIAddResponse{
		HostIf:    api.Interface{Name: wired.Host.Name, MAC: wired.Host.MAC.String()},
		PodIf:     api.Interface{Name: wired.Pod.Name, MAC: wired.Pod.MAC.String()},
		Addresses: pooled,
	}
	var v4, v6 bool
	for _, p := range wired.Addresses {
		gw := netsetup.GatewayV4
		if p.Addr().Is6() {
			gw, v6 = netsetup.GatewayV6, true
		} else {
			v4 = true
		}
		out.IPs = append(out.IPs, api.IPConfig{Address: p, Gateway: gw})
	}
	if v4 {
		out.Routes = append(out.Routes, api.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netsetup.GatewayV4})
	}
	if v6 {
		out.Routes = append(out.Routes, api.Route{Dst: netip.MustParsePrefix("::/0"), GW: netsetup.GatewayV6})
	}
	return out
}

// CNIDel removes an attachment. It is idempotent: a link already gone and
// an agent with no record both succeed. The host link goes first, so the
// address is never free while a route still points it at this pod; the
// pod end goes with it, so the pod's namespace is not needed.
func (h *Handler) CNIDel(ctx context.Context, att api.Attachment) (*api.DelResponse, error) {
	hostIf := api.HostIfName(att.ContainerID, att.IfName)
	if err := h.teardown(hostIf); err != nil {
		return nil, &api.Error{
			Code:    api.CodeIOFailure,
			Msg:     fmt.Sprintf("remove pod network of %s/%s: %v", att.ContainerID, att.IfName, err),
			Details: "the address stays reserved until DEL succeeds; the runtime retries DEL",
		}
	}
	resp, err := h.eps.Del(ctx, att)
	if err != nil || !resp.Found {
		return resp, err
	}
	// Del waits for an ADD of the same attachment still in flight to
	// roll back; that ADD may have wired the pod after the teardown
	// above.
	names := []string{hostIf}
	if resp.HostIfName != "" && resp.HostIfName != hostIf {
		names = append(names, resp.HostIfName)
	}
	for _, name := range names {
		if err := h.teardown(name); err != nil {
			return nil, &api.Error{
				Code:    api.CodeIOFailure,
				Msg:     fmt.Sprintf("remove pod network of %s/%s: %v", att.ContainerID, att.IfName, err),
				Details: "the address was released; the runtime retries DEL to remove the interface",
			}
		}
	}
	return resp, nil
}

// CNICheck compares the attachment's wiring, the pod side read through
// netns (nil: the runtime's namespace is gone), with the agent's record.
func (h *Handler) CNICheck(ctx context.Context, req api.CNICheckRequest, netns *os.File) (*api.CNICheckResponse, error) {
	ep, err := h.eps.Get(ctx, req.Attachment)
	if err != nil {
		return nil, err
	}
	hostIf := ep.HostIfName
	if hostIf == "" {
		hostIf = api.HostIfName(req.ContainerID, req.IfName)
	}
	addrs := make([]netip.Prefix, 0, len(ep.Addresses))
	for _, a := range ep.Addresses {
		addrs = append(addrs, a.Address)
	}
	out := &api.CNICheckResponse{Endpoint: *ep}
	err = h.check(ctx, netsetup.CheckArgs{Netns: netns, HostIf: hostIf, PodIf: req.IfName, Addresses: addrs})
	var mismatch *netsetup.MismatchError
	switch {
	case errors.As(err, &mismatch):
		out.Diffs = mismatch.Diffs
	case err != nil:
		return nil, &api.Error{
			Code:    api.CodeIOFailure,
			Msg:     fmt.Sprintf("read pod network of %s/%s: %v", req.ContainerID, req.IfName, err),
			Details: "retry CHECK; if it keeps failing, inspect the node with `ip link` and `ip route`",
		}
	}
	return out, nil
}

// asAPIError gives err a CNI code: agent errors keep theirs, the rest are
// internal.
func asAPIError(err error) *api.Error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return &api.Error{Code: apiErr.Code, Msg: apiErr.Msg, Details: apiErr.Details}
	}
	return &api.Error{Code: api.CodeInternal, Msg: "lockstep agent internal error", Details: err.Error()}
}

// addDetail appends a sentence to e's details.
func addDetail(e *api.Error, detail string) {
	if e.Details == "" {
		e.Details = detail
		return
	}
	e.Details += "; " + detail
}
