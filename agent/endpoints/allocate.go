package endpoints

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/ipam"
	"lockstep.dev/lockstep/agent/store"
)

// families lists the address families ADD allocates, IPv4 first: those of
// the configured pools, or in Kubernetes mode (Config.PoolsFromStore) those
// of every pool in the store, draining ones included. A node with no pool
// at all allocates IPv4, which fails with the error that says why.
func (s *Service) families(pools []*store.Pool) []bool {
	var v4, v6 bool
	if s.cfg.PoolsFromStore {
		for _, p := range pools {
			v4, v6 = v4 || p.CIDR.Addr().Is4(), v6 || p.CIDR.Addr().Is6()
		}
	} else {
		for _, p := range s.cfg.Pools {
			v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
		}
	}
	switch {
	case v4 && v6:
		return []bool{false, true}
	case v6:
		return []bool{true}
	}
	return []bool{false}
}

// candidates are the pools ADD may allocate a v6 (or IPv4) address from,
// in the order it tries them: the configured pools in configuration order,
// then the store's other pools by address. Draining pools are never
// candidates; that the check happens inside the ADD's write transaction is
// what makes a pool quarantined by another transaction (the release
// handshake in agent/nodeipam) safe from every ADD that commits after it.
func (s *Service) candidates(pools []*store.Pool, v6 bool) []*store.Pool {
	byName := make(map[string]*store.Pool, len(pools))
	for _, p := range pools {
		byName[p.Name] = p
	}
	var out []*store.Pool
	for _, cidr := range s.cfg.Pools {
		if p := byName[PoolName(cidr)]; p != nil && !p.Draining && p.CIDR.Addr().Is6() == v6 {
			out = append(out, p)
			delete(byName, p.Name)
		}
	}
	var rest []*store.Pool
	for _, p := range byName {
		if !p.Draining && p.CIDR.Addr().Is6() == v6 {
			rest = append(rest, p)
		}
	}
	slices.SortFunc(rest, func(a, b *store.Pool) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	return append(out, rest...)
}

// allocate picks a free address of one family from the candidate pools.
func (s *Service) allocate(txn *store.Txn, pools []*store.Pool, v6 bool) (store.AddressRef, error) {
	cands := s.candidates(pools, v6)
	var full []string
	for _, p := range cands {
		used, err := usedIn(txn, pools, p.CIDR)
		if err != nil {
			return store.AddressRef{}, err
		}
		s.cursorMu.Lock()
		start := s.cursors[p.Name]
		s.cursorMu.Unlock()
		addr, err := ipam.Next(p.CIDR, start, used, func(a netip.Addr) (bool, error) {
			return addrInUse(txn, pools, a)
		})
		if errors.Is(err, ipam.ErrExhausted) {
			full = append(full, fmt.Sprintf("%s (%d addresses)", p.Name, ipam.Size(p.CIDR)))
			continue
		}
		if err != nil {
			return store.AddressRef{}, err
		}
		s.cursorMu.Lock()
		s.cursors[p.Name] = addr.Next()
		s.cursorMu.Unlock()
		return store.AddressRef{Pool: p.Name, Addr: addr, Bits: p.CIDR.Bits()}, nil
	}
	return store.AddressRef{}, s.exhausted(pools, v6, full)
}

// exhausted is the error of an ADD that found no free address of one
// family: which pools are full, which are draining, and what to do.
func (s *Service) exhausted(pools []*store.Pool, v6 bool, full []string) error {
	family := "IPv4"
	if v6 {
		family = "IPv6"
	}
	if !s.cfg.PoolsFromStore {
		return &api.Error{
			Code:    api.CodePoolExhausted,
			Msg:     fmt.Sprintf("no free %s address: pool %s is exhausted", family, strings.Join(full, ", pool ")),
			Details: "delete unused pods on this node, run CNI GC, or start the agent with a larger or additional --pool-cidr",
		}
	}
	var draining []string
	for _, p := range pools {
		if p.Draining && p.CIDR.Addr().Is6() == v6 {
			draining = append(draining, p.Name)
		}
	}
	msg := fmt.Sprintf("no free %s address: block %s is exhausted", family, strings.Join(full, ", block "))
	if len(full) == 0 {
		msg = fmt.Sprintf("no free %s address: this node has no %s address block to allocate from", family, family)
	}
	if len(draining) > 0 {
		msg += fmt.Sprintf(" (draining, not allocated from: %s)", strings.Join(draining, ", "))
	}
	return &api.Error{
		Code: api.CodePoolExhausted,
		Msg:  msg,
		Details: "the lockstep operator assigns this node its address blocks in the node's NodeIPAM " +
			"(kubectl get nodeipams); check that the operator runs and that the IPPool has free blocks, or delete unused pods on this node",
	}
}

// allocatePinned allocates exactly a, which must lie in a pool that is not
// draining and be free.
func (s *Service) allocatePinned(txn *store.Txn, pools []*store.Pool, a netip.Addr) (store.AddressRef, error) {
	var draining string
	for _, p := range pools {
		if !p.CIDR.Contains(a) {
			continue
		}
		if p.Draining {
			draining = p.Name
			continue
		}
		if first, last, ok := ipam.Usable(p.CIDR); !ok || a.Less(first) || last.Less(a) {
			return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is reserved in pool %s (network or broadcast address)", a, p.CIDR)
		}
		inUse, err := addrInUse(txn, pools, a)
		if err != nil {
			return store.AddressRef{}, err
		}
		if inUse {
			return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is already in use on this node; remove the %s annotation or pick a free address", a, PinnedIPAnnotation)
		}
		return store.AddressRef{Pool: p.Name, Addr: a, Bits: p.CIDR.Bits()}, nil
	}
	if draining != "" {
		return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is in pool %s, which is draining and hands out no new address", a, draining)
	}
	if s.cfg.PoolsFromStore {
		return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is outside every address block of this node; pin an address of the node's blocks (kubectl get nodeipams)", a)
	}
	return store.AddressRef{}, api.Errorf(api.CodeInvalidConfig, "pinned address %s is outside every pool of this node; start the agent with a --pool-cidr that contains it", a)
}

// CountIn returns how many allocated addresses lie inside cidr, whichever
// pool holds them: a block is empty only if no pool, its own or an
// overlapping one, holds an address of it.
func CountIn(txn *store.Txn, cidr netip.Prefix) (uint64, error) {
	pools, err := store.Pools(txn, nil)
	if err != nil {
		return 0, err
	}
	return usedIn(txn, pools, cidr)
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
