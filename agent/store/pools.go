package store

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// UpsertPool inserts or replaces a pool.
func UpsertPool(txn *Txn, p Pool) error {
	if old, err := PoolByName(txn, nil, p.Name); err != nil {
		return err
	} else if old != nil {
		p.Revisions = old.Revisions
	}
	p.stamp(txn.rev)
	if err := txn.insert(TablePools, &p); err != nil {
		return fmt.Errorf("insert pool %s: %w", p.Name, err)
	}
	return txn.touch(TablePools)
}

// DeletePool removes a pool. It refuses while allocations still refer to it.
func DeletePool(txn *Txn, name string) error {
	if n, err := CountAllocations(txn, name); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("delete pool %s: %d allocations still use it", name, n)
	}
	if _, err := txn.deleteAll(TablePools, IndexID, name); err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	return txn.touch(TablePools)
}

// PoolByName returns the named pool, or nil when there is none.
func PoolByName(txn *Txn, ws memdb.WatchSet, name string) (*Pool, error) {
	ch, raw, err := txn.firstWatch(TablePools, IndexID, name)
	if err != nil {
		return nil, fmt.Errorf("look up pool %s: %w", name, err)
	}
	ws.Add(ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*Pool), nil
}

// Pools returns all pools ordered by name.
func Pools(txn *Txn, ws memdb.WatchSet) ([]*Pool, error) {
	it, err := txn.get(TablePools, IndexID)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	ws.Add(it.WatchCh())
	var out []*Pool
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Pool))
	}
	return out, nil
}
