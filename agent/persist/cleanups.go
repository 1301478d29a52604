package persist

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"
	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/store"
)

// cleanupRecord is the durable part of a store.Cleanup.
type cleanupRecord struct {
	Backend     string    `json:"backend"`
	Reason      string    `json:"reason"`
	Since       time.Time `json:"since"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"lastError,omitempty"`
	LastAttempt time.Time `json:"lastAttempt,omitempty"`
}

func cleanupPut(ch memdb.Change) (*put, error) {
	before, _ := ch.Before.(*store.Cleanup)
	after, _ := ch.After.(*store.Cleanup)
	if after == nil {
		if before == nil {
			return nil, nil
		}
		return &put{bucket: bucketCleanups, key: []byte(before.Backend)}, nil
	}
	value, err := json.Marshal(cleanupRecord{
		Backend: after.Backend, Reason: after.Reason, Since: after.Since,
		Attempts: after.Attempts, LastError: after.LastError, LastAttempt: after.LastAttempt,
	})
	if err != nil {
		return nil, fmt.Errorf("encode clean-up of %s: %w", after.Backend, err)
	}
	return &put{bucket: bucketCleanups, key: []byte(after.Backend), value: value}, nil
}

// LoadCleanups returns every pending clean-up in the file.
func (db *DB) LoadCleanups() (out []*store.Cleanup, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCleanups).ForEach(func(k, v []byte) error {
			var r cleanupRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return corrupt(db.path, fmt.Errorf("clean-up record %q: %w", k, err))
			}
			if r.Backend != string(k) {
				return corrupt(db.path, fmt.Errorf("clean-up record %q names backend %q", k, r.Backend))
			}
			out = append(out, &store.Cleanup{
				Backend: r.Backend, Reason: r.Reason, Since: r.Since,
				Attempts: r.Attempts, LastError: r.LastError, LastAttempt: r.LastAttempt,
			})
			return nil
		})
	})
	return out, err
}

// Dataplane returns the dataplane backend the agent last ran with, as
// SetDataplane recorded it; "" for a new file.
func (db *DB) Dataplane() (name string, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		name = string(tx.Bucket(bucketMeta).Get(keyDataplane))
		return nil
	})
	return name, err
}

// SetDataplane records the dataplane backend the agent runs with, so that
// the next start can tell that it changed and what to clean up.
func (db *DB) SetDataplane(name string) error {
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyDataplane, []byte(name))
	})
}
