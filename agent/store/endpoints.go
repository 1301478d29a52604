package store

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// UpsertEndpoint inserts or replaces an endpoint record. It does not touch
// allocations; AttachEndpoint and ReleaseEndpoint change both together.
func UpsertEndpoint(txn *Txn, e *Endpoint) error {
	if e.HostIfName != "" {
		raw, err := txn.first(TableEndpoints, IndexHostIf, e.HostIfName)
		if err != nil {
			return fmt.Errorf("look up host interface %s: %w", e.HostIfName, err)
		}
		if other, ok := raw.(*Endpoint); ok && other.Attachment != e.Attachment {
			return fmt.Errorf("insert endpoint %s/%s: host interface %s already belongs to %s/%s",
				e.ContainerID, e.IfName, e.HostIfName, other.ContainerID, other.IfName)
		}
	}
	old, err := EndpointByAttachment(txn, nil, e.Attachment)
	if err != nil {
		return err
	}
	e = e.Copy()
	if old != nil {
		e.Revisions = old.Revisions
	}
	e.stamp(txn.rev)
	if err := txn.insert(TableEndpoints, e); err != nil {
		return fmt.Errorf("insert endpoint %s/%s: %w", e.ContainerID, e.IfName, err)
	}
	return txn.touch(TableEndpoints)
}

// AttachEndpoint inserts a new endpoint together with one allocation per
// address it holds. Any address already owned fails the whole call with
// ErrAddressInUse, and the caller aborts the transaction.
func AttachEndpoint(txn *Txn, e *Endpoint) error {
	if old, err := EndpointByAttachment(txn, nil, e.Attachment); err != nil {
		return err
	} else if old != nil {
		return fmt.Errorf("attach endpoint %s/%s: already attached", e.ContainerID, e.IfName)
	}
	for _, ref := range e.Addresses {
		err := InsertAllocation(txn, Allocation{
			Pool: ref.Pool, Addr: ref.Addr, Attachment: e.Attachment, Pod: e.Pod, Created: e.Created,
		})
		if err != nil {
			return err
		}
	}
	return UpsertEndpoint(txn, e)
}

// ReleaseEndpoint deletes an endpoint and frees its addresses in the same
// transaction. It returns the deleted endpoint, or nil when there was none.
func ReleaseEndpoint(txn *Txn, att Attachment) (*Endpoint, error) {
	e, err := EndpointByAttachment(txn, nil, att)
	if err != nil || e == nil {
		return nil, err
	}
	allocs, err := AllocationsByAttachment(txn, nil, att)
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		if err := DeleteAllocation(txn, a.Pool, a.Addr); err != nil {
			return nil, err
		}
	}
	if err := txn.delete(TableEndpoints, e); err != nil {
		return nil, fmt.Errorf("delete endpoint %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	return e, txn.touch(TableEndpoints)
}

// EndpointByAttachment returns the endpoint of an attachment, or nil.
func EndpointByAttachment(txn *Txn, ws memdb.WatchSet, att Attachment) (*Endpoint, error) {
	ch, raw, err := txn.firstWatch(TableEndpoints, IndexID, att.ContainerID, att.IfName)
	if err != nil {
		return nil, fmt.Errorf("look up endpoint %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	ws.Add(ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*Endpoint), nil
}

// EndpointByHostIf returns the endpoint wired to a host interface, or nil.
func EndpointByHostIf(txn *Txn, ws memdb.WatchSet, name string) (*Endpoint, error) {
	ch, raw, err := txn.firstWatch(TableEndpoints, IndexHostIf, name)
	if err != nil {
		return nil, fmt.Errorf("look up endpoint on %s: %w", name, err)
	}
	ws.Add(ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*Endpoint), nil
}

// Endpoints returns all endpoints ordered by attachment.
func Endpoints(txn *Txn, ws memdb.WatchSet) ([]*Endpoint, error) {
	return collect[*Endpoint](txn, ws, TableEndpoints, IndexID)
}

// EndpointsByState returns the endpoints in one life-cycle state.
func EndpointsByState(txn *Txn, ws memdb.WatchSet, st EndpointState) ([]*Endpoint, error) {
	return collect[*Endpoint](txn, ws, TableEndpoints, IndexState, st)
}

// EndpointsByPodUID returns the endpoints of one pod.
func EndpointsByPodUID(txn *Txn, ws memdb.WatchSet, uid string) ([]*Endpoint, error) {
	return collect[*Endpoint](txn, ws, TableEndpoints, IndexPodUID, uid)
}
