package store

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/hashicorp/go-memdb"
)

// Table names.
const (
	TablePools       = "pools"
	TableAllocations = "allocations"
	TableEndpoints   = "endpoints"
	TableRevisions   = "revisions"
	TableNamespaces  = "namespaces"
	TablePods        = "pods"
	TablePolicies    = "policies"
	TableIdentities  = "identities"
	TableSelectors   = "selectors"
	// TableServices and TableEndpointSlices hold what a dataplane needs to
	// translate Services for pods; not durable, like pods and policies.
	TableServices       = "services"
	TableEndpointSlices = "endpointslices"
	// TableNodes holds what translation needs of the agent's own Node.
	TableNodes = "nodes"
)

// Index names. Every table has IndexID, the unique primary key.
const (
	IndexID         = "id"
	IndexAttachment = "attachment"
	IndexPodUID     = "pod_uid"
	IndexHostIf     = "host_if"
	IndexState      = "state"
	IndexIdentity   = "identity"
	IndexKey        = "key"
	// IndexService finds EndpointSlices by the Service they name.
	IndexService = "service"
)

// storeRevisionKey is the TableRevisions row holding the whole store's
// revision.
const storeRevisionKey = ""

// TableNames returns the name of every table of the store, sorted.
func TableNames() []string {
	return slices.Sorted(maps.Keys(schema().Tables))
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TablePools:       poolsTableSchema(),
		TableAllocations: allocationsTableSchema(),
		TableEndpoints:   endpointsTableSchema(),
		TableRevisions:   revisionsTableSchema(),
		TableNamespaces:  namespacesTableSchema(),
		TablePods:        podsTableSchema(),
		TablePolicies:    policiesTableSchema(),
		TableIdentities:  identitiesTableSchema(),
		TableSelectors:   selectorsTableSchema(),
		TableCleanups:    cleanupsTableSchema(),
		TableChanges:     changesTableSchema(),
		TableBlocks:      blocksTableSchema(),

		TableServices:       servicesTableSchema(),
		TableEndpointSlices: endpointSlicesTableSchema(),
		TableNodes:          nodesTableSchema(),
	}}
}

// poolsTableSchema: pools by name.
func poolsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TablePools, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Pool]{
			key:  func(p *Pool) ([]byte, bool) { return keyBuilder{}.str(p.Name), true },
			args: stringArgs(1),
		}},
	}}
}

// allocationsTableSchema: allocations by (pool, address), by attachment
// (container ID, ifname) and by pod UID.
func allocationsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableAllocations, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Allocation]{
			key:  func(a *Allocation) ([]byte, bool) { return allocationKey(a.Pool, a.Addr), true },
			args: stringThenAddrArgs,
		}},
		IndexAttachment: {Name: IndexAttachment, Indexer: keyIndex[*Allocation]{
			key:  func(a *Allocation) ([]byte, bool) { return attachmentKey(a.Attachment), true },
			args: stringArgs(2),
		}},
		IndexPodUID: {Name: IndexPodUID, AllowMissing: true, Indexer: keyIndex[*Allocation]{
			key:  func(a *Allocation) ([]byte, bool) { return podUIDKey(a.Pod) },
			args: stringArgs(1),
		}},
	}}
}

// endpointsTableSchema: endpoints by attachment, host interface, pod UID
// and state.
func endpointsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableEndpoints, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Endpoint]{
			key:  func(e *Endpoint) ([]byte, bool) { return attachmentKey(e.Attachment), true },
			args: stringArgs(2),
		}},
		IndexHostIf: {Name: IndexHostIf, Unique: true, Indexer: keyIndex[*Endpoint]{
			key:  func(e *Endpoint) ([]byte, bool) { return keyBuilder{}.str(e.HostIfName), e.HostIfName != "" },
			args: stringArgs(1),
		}, AllowMissing: true},
		IndexPodUID: {Name: IndexPodUID, AllowMissing: true, Indexer: keyIndex[*Endpoint]{
			key:  func(e *Endpoint) ([]byte, bool) { return podUIDKey(e.Pod) },
			args: stringArgs(1),
		}},
		IndexState: {Name: IndexState, Indexer: keyIndex[*Endpoint]{
			key:  func(e *Endpoint) ([]byte, bool) { return []byte{byte(e.State)}, true },
			args: stateArgs,
		}},
	}}
}

// revisionsTableSchema: one row per table, plus the store-wide row.
func revisionsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableRevisions, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*TableRevision]{
			key:  func(r *TableRevision) ([]byte, bool) { return keyBuilder{}.str(r.Table), true },
			args: stringArgs(1),
		}},
	}}
}

func allocationKey(pool string, addr netip.Addr) []byte { return keyBuilder{}.str(pool).addr(addr) }

func attachmentKey(a Attachment) []byte { return keyBuilder{}.str(a.ContainerID).str(a.IfName) }

func podUIDKey(p PodRef) ([]byte, bool) { return keyBuilder{}.str(p.UID), p.UID != "" }

func stateArgs(_ bool, args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("index needs one EndpointState argument, got %d", len(args))
	}
	st, ok := args[0].(EndpointState)
	if !ok {
		return nil, fmt.Errorf("index argument 0: got %T, want EndpointState", args[0])
	}
	return []byte{byte(st)}, nil
}
