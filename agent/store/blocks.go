package store

import (
	"fmt"
	"net/netip"

	"github.com/hashicorp/go-memdb"
)

// TableBlocks holds the address blocks the node was assigned in Kubernetes
// mode (its NodeIPAM's spec.blocks, kept by agent/nodeipam) and where each
// stands in the release handshake. Every block has a pool of the same name;
// the pool is Draining whenever the block is not BlockActive, so the
// endpoints service, which allocates only from pools that are not
// draining, never needs to know about blocks. Rows are durable: the agent
// writes them to its state file in the transaction that changes them.
const TableBlocks = "blocks"

// BlockState is what the agent may do with a block.
type BlockState uint8

// Block states. Only BlockActive is allocated from.
const (
	// BlockActive: assigned to this node; ADD allocates from it.
	BlockActive BlockState = iota + 1
	// BlockQuarantined: the operator marked the block for release and the
	// agent found it empty in the same transaction that quarantined it,
	// or the mark is a drain (the block left its IPPool) and the block
	// was quarantined with its endpoints' addresses still in it. This is
	// the promise behind a ready-for-release answer, given once the block
	// is also empty: nothing is allocated from the block until the mark
	// is withdrawn or the block is released.
	BlockQuarantined
	// BlockOverlapping: assigned, but it overlaps another block or pool
	// this node still holds addresses in. An address is never taken over
	// from one block by another; the block stays unused until the other
	// one is gone.
	BlockOverlapping
	// BlockRetired: no longer assigned to this node (taken out of the
	// spec, or assigned by a NodeIPAM that is not this node's any more)
	// but still holding addresses of endpoints. It is dropped, pool and
	// all, in the transaction that frees its last address.
	BlockRetired
)

func (s BlockState) String() string {
	switch s {
	case BlockActive:
		return "active"
	case BlockQuarantined:
		return "quarantined"
	case BlockOverlapping:
		return "overlapping"
	case BlockRetired:
		return "retired"
	}
	return "unknown"
}

// ParseBlockState is the inverse of BlockState.String.
func ParseBlockState(s string) (BlockState, error) {
	for st := BlockActive; st <= BlockRetired; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("parse block state %q: not one of active, quarantined, overlapping, retired", s)
}

// Block is one address block assigned to the node.
type Block struct {
	// Name is the block's CIDR in canonical text, which is also the name
	// of its pool.
	Name string
	CIDR netip.Prefix
	// IPPool names the cluster IPPool the block was cut from.
	IPPool string
	// Owner is the UID of the NodeIPAM object that assigned the block. A
	// NodeIPAM of the same name but another UID (the node was deleted and
	// re-created) assigns a new block, even when the CIDR is the same.
	Owner string
	State BlockState

	Revisions
}

func blocksTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableBlocks, Indexes: map[string]*memdb.IndexSchema{
		IndexID: {Name: IndexID, Unique: true, Indexer: keyIndex[*Block]{
			key:  func(b *Block) ([]byte, bool) { return keyBuilder{}.str(b.Name), true },
			args: stringArgs(1),
		}},
	}}
}

// UpsertBlock records b, replacing the block of the same name. The caller's
// b is copied, never stored.
func UpsertBlock(txn *Txn, b *Block) error {
	if !b.CIDR.IsValid() || b.CIDR != b.CIDR.Masked() || b.Name != b.CIDR.String() {
		return fmt.Errorf("record block %q: name must be its CIDR %s in canonical form", b.Name, b.CIDR)
	}
	cp := *b
	old, err := BlockByName(txn, nil, b.Name)
	if err != nil {
		return err
	}
	if old != nil {
		cp.Revisions = old.Revisions
	}
	cp.stamp(txn.rev)
	if err := txn.insert(TableBlocks, &cp); err != nil {
		return fmt.Errorf("record block %s: %w", b.Name, err)
	}
	return txn.touch(TableBlocks)
}

// DeleteBlock removes the block called name; a missing one is not an error.
// It does not touch the block's pool: the caller deletes both in one
// transaction.
func DeleteBlock(txn *Txn, name string) error {
	n, err := txn.deleteAll(TableBlocks, IndexID, name)
	if err != nil {
		return fmt.Errorf("delete block %s: %w", name, err)
	}
	if n == 0 {
		return nil
	}
	return txn.touch(TableBlocks)
}

// BlockByName returns the block called name, or nil.
func BlockByName(txn *Txn, ws memdb.WatchSet, name string) (*Block, error) {
	return first[*Block](txn, ws, TableBlocks, IndexID, name)
}

// Blocks returns every block, ordered by name.
func Blocks(txn *Txn, ws memdb.WatchSet) ([]*Block, error) {
	return collect[*Block](txn, ws, TableBlocks, IndexID)
}
