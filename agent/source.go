package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/store"
)

// ManifestsPollInterval is how often the manifests directory is checked
// for edits when file notifications are not available.
const ManifestsPollInterval = 500 * time.Millisecond

// loadManifests reads dir once and commits its objects. A bad directory at
// start is an error: the agent refuses to enforce something it cannot read.
func loadManifests(st *store.Store, dir string, log *slog.Logger) error {
	objs, err := manifests.Load(dir)
	if err != nil {
		return fmt.Errorf("load --manifests: %w", err)
	}
	_, err = commitObjects(st, objs, log)
	return err
}

// watchManifests follows edits to dir. A bad edit is logged and the last
// good objects stay in force.
func watchManifests(ctx context.Context, st *store.Store, dir string, log *slog.Logger) {
	manifests.Watch(ctx, dir, ManifestsPollInterval, func(objs *manifests.Objects, err error) {
		if err != nil {
			log.Error("manifests changed but cannot be read; keeping the last good state", "dir", dir, "err", err)
			return
		}
		if changed, err := commitObjects(st, objs, log); err != nil {
			log.Error("apply manifests", "dir", dir, "err", err)
		} else if changed {
			log.Info("manifests changed", "dir", dir, "namespaces", len(objs.Namespaces), "pods", len(objs.Pods), "policies", len(objs.Policies))
		}
	})
}

// commitObjects replaces the store's objects with objs in one transaction.
func commitObjects(st *store.Store, objs *manifests.Objects, log *slog.Logger) (bool, error) {
	for _, w := range objs.Warnings {
		log.Warn("manifests", "warning", w)
	}
	txn := st.WriteTxn()
	defer txn.Abort()
	changed, err := store.ReplaceObjects(txn, store.Objects{Namespaces: objs.Namespaces, Pods: objs.Pods, Policies: objs.Policies})
	if err != nil {
		return false, err
	}
	txn.Commit()
	return changed, nil
}
