package manifests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type update struct {
	objs *Objects
	err  error
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ns.yaml")
	write := func(data string) {
		t.Helper()
		// Write and rename, as editors and ConfigMap updates do.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: one}\n")

	updates := make(chan update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Watch(ctx, dir, 20*time.Millisecond, func(o *Objects, err error) { updates <- update{o, err} })
	}()
	next := func(what string) update {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(5 * time.Second):
			t.Fatalf("no update after %s", what)
		}
		return update{}
	}
	has := func(u update, name string) bool { return u.objs != nil && u.objs.NamespaceMap()[name] != nil }

	if u := next("start"); u.err != nil || !has(u, "one") {
		t.Fatalf("first update = %+v, want namespace one", u)
	}
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: two}\n")
	if u := next("edit"); u.err != nil || !has(u, "two") || has(u, "one") {
		t.Fatalf("after edit: %+v, want namespace two only", u)
	}
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: [\n")
	if u := next("bad edit"); u.err == nil || !has(u, "two") {
		t.Fatalf("after bad edit: %+v, want an error and the last good objects", u)
	}
	// The same bad content again is not reported again; a fix is.
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: [\n")
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: three}\n")
	if u := next("fix"); u.err != nil || !has(u, "three") {
		t.Fatalf("after fix: %+v, want namespace three", u)
	}
	// An unchanged rewrite delivers nothing.
	write("apiVersion: v1\nkind: Namespace\nmetadata: {name: three}\n")
	select {
	case u := <-updates:
		t.Errorf("unchanged rewrite delivered %+v", u)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Watch returned %v, want context.Canceled", err)
	}
}

func TestWatchDirectoryAppearsLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	updates := make(chan update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, dir, 20*time.Millisecond, func(o *Objects, err error) { updates <- update{o, err} })
	if u := <-updates; u.err == nil || u.objs != nil {
		t.Fatalf("missing directory: %+v, want an error and no objects", u)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case u := <-updates:
			if u.err == nil && len(u.objs.Pods) == 1 {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no update after the directory appeared")
		}
	}
}

// TestWatcherFollowsFromItsLoad: what Load read is not delivered again by
// Run, and an edit made between Load and Run is not lost.
func TestWatcherFollowsFromItsLoad(t *testing.T) {
	for _, tc := range []struct {
		name      string
		editFirst bool // edit the file between Load and Run
	}{
		{"unchanged", false},
		{"edited before Run", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ns.yaml")
			if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: one}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			w := NewWatcher(dir, 20*time.Millisecond)
			objs, err := w.Load()
			if err != nil || objs.NamespaceMap()["one"] == nil {
				t.Fatalf("Load = %+v, %v; want namespace one", objs, err)
			}
			if tc.editFirst {
				if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: two}\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			updates := make(chan update, 10)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- w.Run(ctx, func(o *Objects, err error) { updates <- update{o, err} }) }()
			defer func() {
				cancel()
				<-done
			}()
			select {
			case u := <-updates:
				if !tc.editFirst {
					t.Fatalf("Run delivered the state Load read: %+v", u)
				}
				if u.err != nil || u.objs.NamespaceMap()["two"] == nil {
					t.Fatalf("Run delivered %+v, want namespace two", u)
				}
			case <-time.After(300 * time.Millisecond):
				if tc.editFirst {
					t.Fatal("the edit made before Run was never delivered")
				}
			}
		})
	}
}

// TestFingerprintMatchesLoad: polling fingerprints the files as a load
// does, so an unchanged directory (or one that cannot be read) is not
// reloaded on every tick.
func TestFingerprintMatchesLoad(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		dangling bool // add c.yaml, a symlink to nothing: it cannot be read
	}{
		{"files", map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n", "b.json": listJSON}, false},
		{"a bad file", map[string]string{"a.yaml": "kind: [\n"}, false},
		{"unreadable", map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"}, true},
		{"empty", map[string]string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, tc.files)
			if tc.dangling {
				if err := os.Symlink("missing", filepath.Join(dir, "c.yaml")); err != nil {
					t.Fatal(err)
				}
			}
			_, sum, err := load(dir)
			if tc.dangling && err == nil {
				t.Fatal("a dangling symlink loaded")
			}
			if fp := fingerprint(dir); fp != sum {
				t.Errorf("fingerprint %x, load's %x", fp, sum)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, sum, _ := load(missing); fingerprint(missing) != sum {
		t.Error("a missing directory: fingerprint differs from load's")
	}
}
