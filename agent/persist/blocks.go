package persist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/hashicorp/go-memdb"
	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// bucketBlocks holds the node's address blocks (store.TableBlocks), keyed
// by CIDR. A file written by an agent that predates it gets the bucket on
// Open; nothing else about the file changes.
var bucketBlocks = []byte("blocks")

// blockRecord is the durable part of a store.Block: all of it but the
// revisions. The state is written as text, so the promise a quarantined
// block stands for reads as what it is in a dump of the file.
type blockRecord struct {
	CIDR   netip.Prefix `json:"cidr"`
	IPPool string       `json:"ipPool"`
	Owner  string       `json:"owner"`
	State  string       `json:"state"`
}

func blockRecordOf(b *store.Block) blockRecord {
	return blockRecord{CIDR: b.CIDR, IPPool: b.IPPool, Owner: b.Owner, State: b.State.String()}
}

// blockPut is the write a change of the blocks table needs, or nil when no
// durable field changed.
func blockPut(ch memdb.Change) (*put, error) {
	before, _ := ch.Before.(*store.Block)
	after, _ := ch.After.(*store.Block)
	switch {
	case after == nil && before != nil:
		return &put{bucket: bucketBlocks, key: []byte(before.Name)}, nil
	case after != nil:
		value, err := json.Marshal(blockRecordOf(after))
		if err != nil {
			return nil, fmt.Errorf("encode block %s: %w", after.Name, err)
		}
		if before != nil {
			if old, _ := json.Marshal(blockRecordOf(before)); bytes.Equal(old, value) {
				return nil, nil
			}
		}
		return &put{bucket: bucketBlocks, key: []byte(after.Name), value: value}, nil
	}
	return nil, nil
}

// LoadBlocks returns every block in the file.
func (db *DB) LoadBlocks() (out []*store.Block, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBlocks).ForEach(func(k, v []byte) error {
			var r blockRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return corrupt(db.path, fmt.Errorf("block record %q: %w", k, err))
			}
			if !r.CIDR.IsValid() || r.CIDR != r.CIDR.Masked() || r.CIDR.String() != string(k) {
				return corrupt(db.path, fmt.Errorf("block record %q holds block %s", k, r.CIDR))
			}
			st, err := store.ParseBlockState(r.State)
			if err != nil {
				return corrupt(db.path, fmt.Errorf("block record %q: %w", k, err))
			}
			out = append(out, &store.Block{Name: string(k), CIDR: r.CIDR, IPPool: r.IPPool, Owner: r.Owner, State: st})
			return nil
		})
	})
	return out, err
}
