package store

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// nodesTableSchema: what Service translation needs of the agent's own Node
// (policyapi.Node: its zone and InternalIPs), by name. In Kubernetes mode the source keeps
// the one row of the agent's Node; standalone has none. Not durable: a
// restarted agent reads its Node again.
func nodesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableNodes, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*policyapi.Node]{
			key:  func(n *policyapi.Node) ([]byte, bool) { return keyBuilder{}.str(n.Name), true },
			args: stringArgs(1),
		}},
	}}
}

// UpsertNode inserts or replaces the Node of n's name.
func UpsertNode(txn *Txn, n *policyapi.Node) error {
	if n.Name == "" {
		return fmt.Errorf("insert node: name is required")
	}
	if err := txn.touch(TableNodes); err != nil {
		return err
	}
	if err := txn.insert(TableNodes, n); err != nil {
		return fmt.Errorf("insert node %s: %w", n.Name, err)
	}
	return nil
}

// DeleteNode removes the Node name, if there is one.
func DeleteNode(txn *Txn, name string) error {
	if err := txn.touch(TableNodes); err != nil {
		return err
	}
	if _, err := txn.deleteAll(TableNodes, IndexID, name); err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}

// NodeByName returns the Node name, or nil.
func NodeByName(txn *Txn, ws memdb.WatchSet, name string) (*policyapi.Node, error) {
	return first[*policyapi.Node](txn, ws, TableNodes, IndexID, name)
}
