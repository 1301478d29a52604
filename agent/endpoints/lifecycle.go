package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/store"
)

// Add reserves one address per configured family for an attachment and
// records the endpoint as Pending. Repeating an ADD for an attachment that
// is already Ready re-uses its addresses under a new operation.
func (s *Service) Add(ctx context.Context, req api.AddRequest) (*api.AddResponse, error) {
	if err := validAttachment(req.Attachment); err != nil {
		return nil, err
	}
	if req.Netns == "" {
		return nil, api.Errorf(api.CodeInvalidEnv, "CNI_NETNS is empty")
	}
	att := toStore(req.Attachment)
	now := s.cfg.Now()
	proto := store.Endpoint{
		Attachment: att,
		Netns:      req.Netns,
		HostIfName: api.HostIfName(att.ContainerID, att.IfName),
		Pod:        store.PodRef(req.Pod),
		State:      store.EndpointPending,
		OpID:       newOpID(),
		Deadline:   now.Add(s.cfg.AddLease),
		Created:    now,
	}
	var ep *store.Endpoint
	err := s.write(ctx, func(txn *store.Txn) error {
		// A write may run more than once: start from the request each time.
		e := proto
		ep = &e
		old, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil {
			return err
		}
		if old != nil {
			if s.inFlight(old) {
				return api.Errorf(api.CodeBusy, "an ADD or DEL of %s/%s is already in progress; retry after it completes", att.ContainerID, att.IfName)
			}
			// A repeated ADD keeps the addresses it already holds.
			ep.Addresses, ep.Created = old.Addresses, old.Created
			return store.UpsertEndpoint(txn, ep)
		}
		pinned, err := pinnedAddresses(txn, ep.Pod, s.cfg.PinOptIn)
		if err != nil {
			return err
		}
		pools, err := store.Pools(txn, nil)
		if err != nil {
			return err
		}
		for _, v6 := range s.families(pools) {
			var ref store.AddressRef
			if pin := pinned.of(v6); pin.IsValid() {
				ref, err = s.allocatePinned(txn, pools, pin)
			} else {
				ref, err = s.allocate(txn, pools, v6)
			}
			if err != nil {
				return err
			}
			ep.Addresses = append(ep.Addresses, ref)
		}
		return store.AttachEndpoint(txn, ep)
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	s.log.Debug("add", "container", att.ContainerID, "ifname", att.IfName, "op", ep.OpID, "addresses", ep.Addresses)
	return &api.AddResponse{OpID: ep.OpID, HostIfName: ep.HostIfName, Addresses: addresses(ep), Deadline: ep.Deadline}, nil
}

// PinnedIPAnnotation on a Pod the agent knows asks for those exact
// addresses instead of the next free ones: one address, or an IPv4 and an
// IPv6 address separated by a comma. A family it leaves out gets the next
// free address; a family the node has no pool of allocates nothing, pinned
// or not. With Config.PinOptIn (Kubernetes mode) it is honoured only in a
// namespace labelled PinNamespaceLabel: "true", and refused elsewhere.
const PinnedIPAnnotation = "lockstep.dev/ip"

// PinNamespaceLabel, set to "true" on a Namespace, lets its pods pin their
// addresses with PinnedIPAnnotation in Kubernetes mode. An address is
// what other tenants' ipBlock rules allow; a label on the Namespace is
// what a tenant who may create pods in it cannot usually set, so an
// administrator decides who may choose one.
const PinNamespaceLabel = "lockstep.dev/allow-ip-pin"

// pins are the addresses a pod pins, by family; zero Addrs where none.
type pins struct{ v4, v6 netip.Addr }

func (p pins) of(v6 bool) netip.Addr {
	if v6 {
		return p.v6
	}
	return p.v4
}

// pinnedAddresses returns the addresses the pod's PinnedIPAnnotation asks
// for. With optIn, a pin in a namespace without PinNamespaceLabel: "true"
// fails the ADD: starting the pod on another address would leave whoever
// pinned it to find out from broken traffic.
func pinnedAddresses(txn *store.Txn, ref store.PodRef, optIn bool) (pins, error) {
	if ref.Name == "" {
		return pins{}, nil
	}
	pod, err := store.PodByName(txn, nil, ref.Namespace, ref.Name)
	if err != nil || pod == nil {
		return pins{}, err
	}
	raw, ok := pod.Object.Annotations[PinnedIPAnnotation]
	if !ok {
		return pins{}, nil
	}
	p, err := ParsePins(raw)
	if err != nil {
		return pins{}, api.Errorf(api.CodeInvalidConfig, "pod %s/%s: annotation %s: %v", ref.Namespace, ref.Name, PinnedIPAnnotation, err)
	}
	if optIn {
		ns, err := store.NamespaceByName(txn, nil, ref.Namespace)
		if err != nil {
			return pins{}, err
		}
		if ns == nil || ns.Labels[PinNamespaceLabel] != "true" {
			return pins{}, &api.Error{
				Code: api.CodeInvalidConfig,
				Msg: fmt.Sprintf("pod %s/%s: annotation %s=%q pins an address, and namespace %s does not allow pinned addresses",
					ref.Namespace, ref.Name, PinnedIPAnnotation, raw, ref.Namespace),
				Details: fmt.Sprintf("an administrator allows them with: kubectl label namespace %s %s=true; or remove the annotation", ref.Namespace, PinNamespaceLabel),
			}
		}
	}
	return pins{v4: p[0], v6: p[1]}, nil
}

// ParsePins parses a PinnedIPAnnotation value: the pinned IPv4 address
// and IPv6 address, zero where the value has none.
func ParsePins(value string) ([2]netip.Addr, error) {
	var out [2]netip.Addr
	fields := strings.Split(value, ",")
	if len(fields) > 2 {
		return out, fmt.Errorf("%q: want one address, or an IPv4 and an IPv6 address separated by a comma", value)
	}
	for _, f := range fields {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil || a.Zone() != "" {
			return out, fmt.Errorf("%q is not an IP address", strings.TrimSpace(f))
		}
		a = a.Unmap()
		family := 0
		if a.Is6() {
			family = 1
		}
		if out[family].IsValid() {
			return out, fmt.Errorf("%q pins two addresses of one family: %s and %s", value, out[family], a)
		}
		out[family] = a
	}
	return out, nil
}

// Confirm marks an ADD as wired. It fails with CodeCancelled when a DEL, GC
// or a later ADD of the same attachment superseded it.
func (s *Service) Confirm(ctx context.Context, req api.OpRequest) error {
	att := toStore(req.Attachment)
	var hostIf string
	// rev is a store revision that holds the endpoint Ready: the one
	// this write commits as when it changes it, else the last committed.
	var rev uint64
	err := s.write(ctx, func(txn *store.Txn) error {
		e, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil {
			return err
		}
		switch {
		case e == nil || e.OpID != req.OpID || e.State == store.EndpointCancelled:
			return &api.Error{
				Code:    api.CodeCancelled,
				Msg:     fmt.Sprintf("ADD of %s/%s was cancelled: a DEL for it arrived while it was in flight", att.ContainerID, att.IfName),
				Details: "the ADD has been rolled back; the runtime may retry it",
			}
		case e.State == store.EndpointReady:
			hostIf, rev = e.HostIfName, store.Revision(txn, "")
			return nil
		}
		hostIf = e.HostIfName
		e = e.Copy()
		e.State, e.Deadline = store.EndpointReady, time.Time{}
		if err := store.UpsertEndpoint(txn, e); err != nil {
			return err
		}
		rev = store.Revision(txn, "")
		return nil
	})
	if err == nil && s.cfg.Enforce != nil {
		if err := s.cfg.Enforce(ctx, hostIf, rev); err != nil {
			var apiErr *api.Error
			if errors.As(err, &apiErr) && apiErr.Code == api.CodeTryAgainLater {
				// The pod object has not reached the agent yet (Kubernetes
				// mode): the runtime retries, as the error says.
				return apiErr
			}
			return &api.Error{
				Code:    api.CodeInternal,
				Msg:     fmt.Sprintf("policy for %s/%s could not be put in force", att.ContainerID, att.IfName),
				Details: err.Error() + "; the ADD is rolled back so the pod never runs unprotected",
			}
		}
	}
	return asAPIError(err)
}

// Abort rolls back the ADD identified by req.OpID and frees its addresses.
// An ADD the agent no longer knows is already rolled back.
func (s *Service) Abort(ctx context.Context, req api.OpRequest) error {
	att := toStore(req.Attachment)
	err := s.write(ctx, func(txn *store.Txn) error {
		e, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil || e == nil || e.OpID != req.OpID {
			return err
		}
		_, err = store.ReleaseEndpoint(txn, att)
		return err
	})
	return asAPIError(err)
}

// Del releases an attachment. When its ADD is still in flight, Del cancels
// it and waits, up to Config.DelWait, for the ADD to roll back first.
func (s *Service) Del(ctx context.Context, a api.Attachment) (*api.DelResponse, error) {
	if err := validAttachment(a); err != nil {
		return nil, err
	}
	att := toStore(a)
	var waitFor *store.Endpoint
	err := s.write(ctx, func(txn *store.Txn) error {
		waitFor = nil // a write may run more than once
		e, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil || e == nil || !s.inFlight(e) {
			return err
		}
		waitFor = e.Copy()
		waitFor.State = store.EndpointCancelled
		return store.UpsertEndpoint(txn, waitFor)
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	if waitFor != nil {
		s.log.Info("DEL cancels in-flight ADD", "container", att.ContainerID, "ifname", att.IfName, "op", waitFor.OpID)
		if gone := s.waitRolledBack(ctx, att, waitFor.OpID); gone {
			return &api.DelResponse{Found: true, HostIfName: waitFor.HostIfName, Addresses: addresses(waitFor)}, nil
		}
	}

	var released *store.Endpoint
	err = s.write(ctx, func(txn *store.Txn) error {
		var err error
		released, err = store.ReleaseEndpoint(txn, att)
		return err
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	if released == nil {
		return &api.DelResponse{Found: waitFor != nil}, nil
	}
	return &api.DelResponse{Found: true, HostIfName: released.HostIfName, Addresses: addresses(released)}, nil
}

// waitRolledBack blocks until the cancelled ADD op of att is gone, the wait
// bound passes, or ctx ends. It reports whether the ADD rolled back.
func (s *Service) waitRolledBack(ctx context.Context, att store.Attachment, op uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DelWait)
	defer cancel()
	for {
		ws := memdb.NewWatchSet()
		e, err := store.EndpointByAttachment(s.store.ReadTxn(), ws, att)
		if err != nil {
			return false
		}
		if e == nil || e.OpID != op {
			return e == nil
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return false
		}
	}
}

// asAPIError gives every error a CNI code: agent errors keep theirs, the
// rest are internal.
func asAPIError(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return &api.Error{Code: api.CodeInternal, Msg: "lockstep agent internal error", Details: err.Error()}
}
