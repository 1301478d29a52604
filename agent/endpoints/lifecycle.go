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
	"lockstep.dev/lockstep/agent/ipam"
	"lockstep.dev/lockstep/agent/store"
)

// Add reserves one address per configured family for an attachment and
// records the endpoint as Pending. Repeating an ADD for an attachment that
// is already Ready re-uses its addresses under a new operation.
func (s *Service) Add(_ context.Context, req api.AddRequest) (*api.AddResponse, error) {
	if err := validAttachment(req.Attachment); err != nil {
		return nil, err
	}
	if req.Netns == "" {
		return nil, api.Errorf(api.CodeInvalidEnv, "CNI_NETNS is empty")
	}
	att := toStore(req.Attachment)
	now := s.cfg.Now()
	ep := &store.Endpoint{
		Attachment: att,
		Netns:      req.Netns,
		HostIfName: api.HostIfName(att.ContainerID, att.IfName),
		Pod:        store.PodRef(req.Pod),
		State:      store.EndpointPending,
		OpID:       newOpID(),
		Deadline:   now.Add(s.cfg.AddLease),
		Created:    now,
	}
	err := s.write(func(txn *store.Txn) error {
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
		pinned, err := pinnedAddress(txn, ep.Pod)
		if err != nil {
			return err
		}
		for _, v6 := range s.families() {
			var ref store.AddressRef
			if pinned.IsValid() && pinned.Is6() == v6 {
				ref, err = s.allocatePinned(txn, pinned)
			} else {
				ref, err = s.allocate(txn, v6)
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

// families lists the address families to allocate: IPv4, and IPv6 when a
// (non-draining) IPv6 pool is configured.
func (s *Service) families() []bool {
	for _, p := range s.cfg.Pools {
		if p.Addr().Is6() {
			return []bool{false, true}
		}
	}
	return []bool{false}
}

// allocate picks a free address of one family from the configured pools, in
// configuration order.
func (s *Service) allocate(txn *store.Txn, v6 bool) (store.AddressRef, error) {
	pools, err := store.Pools(txn, nil)
	if err != nil {
		return store.AddressRef{}, err
	}
	var full []string
	for _, cidr := range s.cfg.Pools {
		if cidr.Addr().Is6() != v6 {
			continue
		}
		name := PoolName(cidr)
		used, err := usedIn(txn, pools, cidr)
		if err != nil {
			return store.AddressRef{}, err
		}
		s.cursorMu.Lock()
		start := s.cursors[name]
		s.cursorMu.Unlock()
		addr, err := ipam.Next(cidr, start, used, func(a netip.Addr) (bool, error) {
			return addrInUse(txn, pools, a)
		})
		if errors.Is(err, ipam.ErrExhausted) {
			full = append(full, fmt.Sprintf("%s (%d addresses)", name, ipam.Size(cidr)))
			continue
		}
		if err != nil {
			return store.AddressRef{}, err
		}
		s.cursorMu.Lock()
		s.cursors[name] = addr.Next()
		s.cursorMu.Unlock()
		return store.AddressRef{Pool: name, Addr: addr, Bits: cidr.Bits()}, nil
	}
	family := "IPv4"
	if v6 {
		family = "IPv6"
	}
	return store.AddressRef{}, &api.Error{
		Code:    api.CodePoolExhausted,
		Msg:     fmt.Sprintf("no free %s address: pool %s is exhausted", family, strings.Join(full, ", pool ")),
		Details: "delete unused pods on this node, run CNI GC, or start the agent with a larger or additional --pool-cidr",
	}
}

// PinnedIPAnnotation on a Pod the agent knows (from --manifests) asks for
// that exact address instead of the next free one.
const PinnedIPAnnotation = "lockstep.dev/ip"

// pinnedAddress returns the address the pod's PinnedIPAnnotation asks for,
// or the zero Addr.
func pinnedAddress(txn *store.Txn, ref store.PodRef) (netip.Addr, error) {
	if ref.Name == "" {
		return netip.Addr{}, nil
	}
	pod, err := store.PodByName(txn, nil, ref.Namespace, ref.Name)
	if err != nil || pod == nil {
		return netip.Addr{}, err
	}
	raw, ok := pod.Object.Annotations[PinnedIPAnnotation]
	if !ok {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(strings.TrimSpace(raw))
	if err != nil {
		return netip.Addr{}, api.Errorf(api.CodeInvalidConfig, "pod %s/%s: annotation %s=%q is not an IP address", ref.Namespace, ref.Name, PinnedIPAnnotation, raw)
	}
	return a.Unmap(), nil
}

// allocatePinned allocates exactly a, which must lie in a configured pool
// and be free.
func (s *Service) allocatePinned(txn *store.Txn, a netip.Addr) (store.AddressRef, error) {
	pools, err := store.Pools(txn, nil)
	if err != nil {
		return store.AddressRef{}, err
	}
	for _, cidr := range s.cfg.Pools {
		if !cidr.Contains(a) {
			continue
		}
		if first, last, ok := ipam.Usable(cidr); !ok || a.Less(first) || last.Less(a) {
			return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is reserved in pool %s (network or broadcast address)", a, cidr)
		}
		inUse, err := addrInUse(txn, pools, a)
		if err != nil {
			return store.AddressRef{}, err
		}
		if inUse {
			return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is already in use on this node; remove the %s annotation or pick a free address", a, PinnedIPAnnotation)
		}
		return store.AddressRef{Pool: PoolName(cidr), Addr: a, Bits: cidr.Bits()}, nil
	}
	return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is outside every pool of this node; start the agent with a --pool-cidr that contains it", a)
}

// usedIn counts the allocated addresses inside cidr, whichever pool holds
// them: a draining pool restored from disk may overlap a configured one.
func usedIn(txn *store.Txn, pools []*store.Pool, cidr netip.Prefix) (uint64, error) {
	var used uint64
	for _, p := range pools {
		switch {
		case p.CIDR == cidr:
			n, err := store.CountAllocations(txn, p.Name)
			if err != nil {
				return 0, err
			}
			used += uint64(n)
		case p.CIDR.Overlaps(cidr):
			allocs, err := store.AllocationsByPool(txn, nil, p.Name)
			if err != nil {
				return 0, err
			}
			for _, a := range allocs {
				if cidr.Contains(a.Addr) {
					used++
				}
			}
		}
	}
	return used, nil
}

// addrInUse reports whether any pool containing a holds an allocation of
// it. Checking every containing pool, draining ones included, is what keeps
// a re-configured, overlapping pool from handing out an address a restored
// allocation still holds.
func addrInUse(txn *store.Txn, pools []*store.Pool, a netip.Addr) (bool, error) {
	for _, p := range pools {
		if !p.CIDR.Contains(a) {
			continue
		}
		alloc, err := store.AllocationByAddr(txn, nil, p.Name, a)
		if err != nil {
			return false, err
		}
		if alloc != nil {
			return true, nil
		}
	}
	return false, nil
}

// Confirm marks an ADD as wired. It fails with CodeCancelled when a DEL, GC
// or a later ADD of the same attachment superseded it.
func (s *Service) Confirm(ctx context.Context, req api.OpRequest) error {
	att := toStore(req.Attachment)
	var hostIf string
	err := s.write(func(txn *store.Txn) error {
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
			hostIf = e.HostIfName
			return nil
		}
		hostIf = e.HostIfName
		e = e.Copy()
		e.State, e.Deadline = store.EndpointReady, time.Time{}
		return store.UpsertEndpoint(txn, e)
	})
	if err == nil && s.cfg.Enforce != nil {
		if err := s.cfg.Enforce(ctx, hostIf); err != nil {
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
func (s *Service) Abort(_ context.Context, req api.OpRequest) error {
	att := toStore(req.Attachment)
	err := s.write(func(txn *store.Txn) error {
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
	err := s.write(func(txn *store.Txn) error {
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
	err = s.write(func(txn *store.Txn) error {
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

// GC releases every endpoint not in req.Valid, except ADDs still in flight.
func (s *Service) GC(_ context.Context, req api.GCRequest) (*api.GCResponse, error) {
	valid := make(map[store.Attachment]bool, len(req.Valid))
	for _, a := range req.Valid {
		valid[toStore(a)] = true
	}
	resp := &api.GCResponse{Released: []api.Endpoint{}, Retained: []string{}}
	err := s.write(func(txn *store.Txn) error {
		eps, err := store.Endpoints(txn, nil)
		if err != nil {
			return err
		}
		resp.Released, resp.Retained = resp.Released[:0], resp.Retained[:0]
		for _, e := range eps {
			if valid[e.Attachment] || s.inFlight(e) {
				resp.Retained = append(resp.Retained, e.HostIfName)
				continue
			}
			if _, err := store.ReleaseEndpoint(txn, e.Attachment); err != nil {
				return err
			}
			resp.Released = append(resp.Released, toAPI(e))
		}
		return nil
	})
	if err != nil {
		return nil, asAPIError(err)
	}
	if n := len(resp.Released); n > 0 {
		s.log.Info("GC released stale endpoints", "count", n)
	}
	return resp, nil
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
