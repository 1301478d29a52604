package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/store"
)

// TestManifestsEditedAfterTheLoadReachTheStore: the agent loads its
// manifests once before it serves, and the watcher that follows them from
// that load still delivers an edit made before it started.
func TestManifestsEditedAfterTheLoadReachTheStore(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		t.Helper()
		doc := "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + name + "}\n"
		if err := os.WriteFile(filepath.Join(dir, "ns.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	has := func(st *store.Store, name string) bool {
		ns, err := store.NamespaceByName(st.ReadTxn(), nil, name)
		return err == nil && ns != nil
	}
	write("one")
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := loadManifests(st, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if !has(st, "one") {
		t.Fatal("namespace one is not in the store after the load")
	}
	write("two")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchManifests(ctx, st, w, log); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); !has(st, "two"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the edit made before the watcher started never reached the store")
		}
	}
	if has(st, "one") {
		t.Error("namespace one is still in the store after the edit removed it")
	}
}
