package store

import (
	"fmt"
	"net/netip"

	"github.com/hashicorp/go-memdb"
)

// InsertAllocation records that (a.Pool, a.Addr) belongs to a.Attachment.
// It fails with ErrAddressInUse when the address already has an owner:
// allocations are never merged or overwritten.
func InsertAllocation(txn *Txn, a Allocation) error {
	old, err := AllocationByAddr(txn, nil, a.Pool, a.Addr)
	if err != nil {
		return err
	}
	if old != nil {
		return fmt.Errorf("allocate %s from pool %s for %s/%s: %w (held by %s/%s)",
			a.Addr, a.Pool, a.ContainerID, a.IfName, ErrAddressInUse, old.ContainerID, old.IfName)
	}
	a.stamp(txn.rev)
	if err := txn.insert(TableAllocations, &a); err != nil {
		return fmt.Errorf("insert allocation %s/%s: %w", a.Pool, a.Addr, err)
	}
	return txn.touch(TableAllocations)
}

// DeleteAllocation frees (pool, addr). Freeing a free address is
// ErrNotFound.
func DeleteAllocation(txn *Txn, pool string, addr netip.Addr) error {
	n, err := txn.deleteAll(TableAllocations, IndexID, pool, addr)
	if err != nil {
		return fmt.Errorf("delete allocation %s/%s: %w", pool, addr, err)
	}
	if n == 0 {
		return fmt.Errorf("delete allocation %s/%s: %w", pool, addr, ErrNotFound)
	}
	return txn.touch(TableAllocations)
}

// AllocationByAddr returns the allocation of (pool, addr), or nil.
func AllocationByAddr(txn *Txn, ws memdb.WatchSet, pool string, addr netip.Addr) (*Allocation, error) {
	ch, raw, err := txn.firstWatch(TableAllocations, IndexID, pool, addr)
	if err != nil {
		return nil, fmt.Errorf("look up allocation %s/%s: %w", pool, addr, err)
	}
	ws.Add(ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*Allocation), nil
}

// AllocationsByAttachment returns the allocations of one attachment.
func AllocationsByAttachment(txn *Txn, ws memdb.WatchSet, att Attachment) ([]*Allocation, error) {
	return collect[*Allocation](txn, ws, TableAllocations, IndexAttachment, att.ContainerID, att.IfName)
}

// AllocationsByPodUID returns the allocations of every attachment of a pod.
func AllocationsByPodUID(txn *Txn, ws memdb.WatchSet, uid string) ([]*Allocation, error) {
	return collect[*Allocation](txn, ws, TableAllocations, IndexPodUID, uid)
}

// AllocationsByPool returns a pool's allocations in address order.
func AllocationsByPool(txn *Txn, ws memdb.WatchSet, pool string) ([]*Allocation, error) {
	return collect[*Allocation](txn, ws, TableAllocations, IndexID+"_prefix", pool)
}

// CountAllocations returns how many addresses of a pool are allocated.
func CountAllocations(txn *Txn, pool string) (int, error) {
	it, err := txn.get(TableAllocations, IndexID+"_prefix", pool)
	if err != nil {
		return 0, fmt.Errorf("count allocations of pool %s: %w", pool, err)
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}

func collect[T any](txn *Txn, ws memdb.WatchSet, table, index string, args ...any) ([]T, error) {
	it, err := txn.get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s by %s: %w", table, index, err)
	}
	ws.Add(it.WatchCh())
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out, nil
}
