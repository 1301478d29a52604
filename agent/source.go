package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/store"
)

// ManifestsPollInterval is how often the manifests directory is checked
// for edits when file notifications are not available.
const ManifestsPollInterval = 500 * time.Millisecond

// loadManifests reads dir once and commits its objects. A bad directory at
// start is an error: the agent refuses to enforce something it cannot read.
// The returned watcher follows dir from what was read, for
// watchManifests: the files are not read a second time.
func loadManifests(st *store.Store, dir string, log *slog.Logger) (*manifests.Watcher, error) {
	w := manifests.NewWatcher(dir, ManifestsPollInterval)
	objs, err := w.Load()
	if err != nil {
		return nil, fmt.Errorf("load --manifests: %w", err)
	}
	if _, err := commitObjects(st, objs, log); err != nil {
		return nil, err
	}
	return w, nil
}

// watchManifests follows edits to the directory w loaded. A bad edit is
// logged and the last good objects stay in force.
func watchManifests(ctx context.Context, st *store.Store, w *manifests.Watcher, log *slog.Logger) {
	w.Run(ctx, func(objs *manifests.Objects, err error) {
		if err != nil {
			log.Error("manifests changed but cannot be read; keeping the last good state", "dir", w.Dir(), "err", err)
			return
		}
		if changed, err := commitObjects(st, objs, log); err != nil {
			log.Error("apply manifests", "dir", w.Dir(), "err", err)
		} else if changed {
			log.Info("manifests changed", "dir", w.Dir(), "namespaces", len(objs.Namespaces), "pods", len(objs.Pods), "policies", len(objs.Policies), "services", len(objs.Services))
		}
	})
}

// commitObjects replaces the store's objects with objs in one transaction,
// with the EndpointSlices their Services and pods give: an edit of a
// Service's selector, of a pod's labels and of a policy reaches the
// dataplane in one apply.
func commitObjects(st *store.Store, objs *manifests.Objects, log *slog.Logger) (bool, error) {
	for _, w := range objs.Warnings {
		log.Warn("manifests", "warning", w)
	}
	txn := st.WriteTxn()
	defer txn.Abort()
	changed, err := store.ReplaceObjects(txn, store.Objects{Namespaces: objs.Namespaces, Pods: objs.Pods, Policies: objs.Policies, Services: objs.Services})
	if err != nil {
		return false, err
	}
	slicesChanged, err := endpointslice.SyncTxn(txn)
	if err != nil {
		return false, err
	}
	if err := txn.Commit(); err != nil {
		return false, err
	}
	return changed || slicesChanged, nil
}
