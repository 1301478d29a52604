package store

import (
	"fmt"
	"reflect"

	"github.com/hashicorp/go-memdb"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Service is a Kubernetes Service as the dataplane needs it (see
// policyapi.Service). Like pods and policies it is not durable: a restarted
// agent reads it again from its source. Objects are immutable once
// inserted.
type Service struct {
	Object *policyapi.Service

	Revisions
}

// EndpointSlice is a Kubernetes EndpointSlice as the dataplane needs it
// (see policyapi.EndpointSlice), from the API server or, in standalone mode,
// computed by the agent (agent/endpointslice). Not durable; immutable
// once inserted.
type EndpointSlice struct {
	Object *policyapi.EndpointSlice

	Revisions
}

// servicesTableSchema: Services by (namespace, name).
func servicesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableServices, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Service]{
			key:  func(s *Service) ([]byte, bool) { return nsNameKey(s.Object.Namespace, s.Object.Name), true },
			args: stringArgs(2),
		}},
	}}
}

// endpointSlicesTableSchema: EndpointSlices by (namespace, name) and by
// the Service they name, (namespace, kubernetes.io/service-name); a slice
// without that label is in the first index only.
func endpointSlicesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableEndpointSlices, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*EndpointSlice]{
			key:  func(s *EndpointSlice) ([]byte, bool) { return nsNameKey(s.Object.Namespace, s.Object.Name), true },
			args: stringArgs(2),
		}},
		IndexService: {Name: IndexService, AllowMissing: true, Indexer: keyIndex[*EndpointSlice]{
			key: func(s *EndpointSlice) ([]byte, bool) {
				name := s.Object.ServiceName()
				return nsNameKey(s.Object.Namespace, name), name != ""
			},
			args: stringArgs(2),
		}},
	}}
}

// UpsertService inserts or replaces a Service.
func UpsertService(txn *Txn, svc *policyapi.Service) error {
	if err := txn.touch(TableServices); err != nil {
		return err
	}
	old, err := ServiceByName(txn, nil, svc.Namespace, svc.Name)
	if err != nil {
		return err
	}
	row := &Service{Object: svc}
	if old != nil {
		row.Revisions = old.Revisions
	}
	row.stamp(txn.rev)
	if err := txn.insert(TableServices, row); err != nil {
		return fmt.Errorf("insert service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// DeleteService removes a Service; its EndpointSlices stay, as in the API
// until their controller deletes them. Deleting an unknown Service is not
// an error.
func DeleteService(txn *Txn, namespace, name string) error {
	old, err := ServiceByName(txn, nil, namespace, name)
	if err != nil || old == nil {
		return err
	}
	if err := txn.touch(TableServices); err != nil {
		return err
	}
	if err := txn.delete(TableServices, old); err != nil {
		return fmt.Errorf("delete service %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ServiceByName returns a Service or nil.
func ServiceByName(txn *Txn, ws memdb.WatchSet, namespace, name string) (*Service, error) {
	return first[*Service](txn, ws, TableServices, IndexID, namespace, name)
}

// Services lists every Service object.
func Services(txn *Txn, ws memdb.WatchSet) ([]*policyapi.Service, error) {
	rows, err := collect[*Service](txn, ws, TableServices, IndexID)
	if err != nil {
		return nil, err
	}
	out := make([]*policyapi.Service, len(rows))
	for i, r := range rows {
		out[i] = r.Object
	}
	return out, nil
}

// UpsertEndpointSlice inserts or replaces an EndpointSlice.
func UpsertEndpointSlice(txn *Txn, s *policyapi.EndpointSlice) error {
	if err := txn.touch(TableEndpointSlices); err != nil {
		return err
	}
	old, err := EndpointSliceByName(txn, nil, s.Namespace, s.Name)
	if err != nil {
		return err
	}
	row := &EndpointSlice{Object: s}
	if old != nil {
		row.Revisions = old.Revisions
	}
	row.stamp(txn.rev)
	if err := txn.insert(TableEndpointSlices, row); err != nil {
		return fmt.Errorf("insert endpointslice %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// DeleteEndpointSlice removes an EndpointSlice. Deleting an unknown slice
// is not an error.
func DeleteEndpointSlice(txn *Txn, namespace, name string) error {
	old, err := EndpointSliceByName(txn, nil, namespace, name)
	if err != nil || old == nil {
		return err
	}
	if err := txn.touch(TableEndpointSlices); err != nil {
		return err
	}
	if err := txn.delete(TableEndpointSlices, old); err != nil {
		return fmt.Errorf("delete endpointslice %s/%s: %w", namespace, name, err)
	}
	return nil
}

// EndpointSliceByName returns an EndpointSlice or nil.
func EndpointSliceByName(txn *Txn, ws memdb.WatchSet, namespace, name string) (*EndpointSlice, error) {
	return first[*EndpointSlice](txn, ws, TableEndpointSlices, IndexID, namespace, name)
}

// EndpointSlices lists every EndpointSlice object.
func EndpointSlices(txn *Txn, ws memdb.WatchSet) ([]*policyapi.EndpointSlice, error) {
	rows, err := collect[*EndpointSlice](txn, ws, TableEndpointSlices, IndexID)
	if err != nil {
		return nil, err
	}
	out := make([]*policyapi.EndpointSlice, len(rows))
	for i, r := range rows {
		out[i] = r.Object
	}
	return out, nil
}

// EndpointSlicesOfService lists the EndpointSlices that name the Service
// namespace/name.
func EndpointSlicesOfService(txn *Txn, ws memdb.WatchSet, namespace, name string) ([]*EndpointSlice, error) {
	return collect[*EndpointSlice](txn, ws, TableEndpointSlices, IndexService, namespace, name)
}

// ReplaceEndpointSlices makes the store's EndpointSlices exactly slices,
// inside txn: equal ones are left alone, new and changed ones upserted,
// missing ones deleted. It reports whether anything changed.
func ReplaceEndpointSlices(txn *Txn, slices []*policyapi.EndpointSlice) (bool, error) {
	old, err := EndpointSlices(txn, nil)
	if err != nil {
		return false, err
	}
	changed := false
	keep := make(map[[2]string]bool, len(slices))
	for _, s := range slices {
		keep[[2]string{s.Namespace, s.Name}] = true
		cur, err := EndpointSliceByName(txn, nil, s.Namespace, s.Name)
		if err != nil {
			return false, err
		}
		if cur != nil && reflect.DeepEqual(cur.Object, s) {
			continue
		}
		if err := UpsertEndpointSlice(txn, s); err != nil {
			return false, err
		}
		changed = true
	}
	for _, s := range old {
		if !keep[[2]string{s.Namespace, s.Name}] {
			if err := DeleteEndpointSlice(txn, s.Namespace, s.Name); err != nil {
				return false, err
			}
			changed = true
		}
	}
	return changed, nil
}
