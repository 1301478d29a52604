package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"lockstep.dev/lockstep/agent/persist"
)

// TestStartRefusesABadStateFile: an agent whose state file it cannot
// trust does not start (neither empty nor on what is not its own), leaves
// the file as it was, opens no socket, and tells the operator what to do.
func TestStartRefusesABadStateFile(t *testing.T) {
	tests := []struct {
		name   string
		file   func(t *testing.T, path string) []byte
		want   error
		advice string
	}{
		{"zero-length", func(t *testing.T, path string) []byte { return nil }, persist.ErrEmptyStateFile, "drain the node"},
		{"truncated", func(t *testing.T, path string) []byte { return ownFile(t)[:3*4096] }, persist.ErrTruncated, "restore it from a backup"},
		{"garbage", func(t *testing.T, path string) []byte {
			return bytes.Repeat([]byte("lockstep "), 1000)
		}, persist.ErrCorrupt, "move it aside to start with no allocations"},
		{"another program's bbolt file", func(t *testing.T, path string) []byte {
			bdb, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = bdb.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("leases"))
				if err != nil {
					return err
				}
				return b.Put([]byte("10.0.0.1"), []byte("host-a"))
			})
			bdb.Close()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			return b
		}, persist.ErrForeignStateFile, "point --state-dir at the agent's own directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "10.244.0.0/24")
			if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.StateDir, persist.FileName)
			content := tc.file(t, path)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := Run(ctx, cfg)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.advice) {
				t.Fatalf("start: %v\nwant %v naming %s and saying %q", err, tc.want, path, tc.advice)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, content) {
				t.Error("the refused state file was modified")
			}
			if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
				t.Error("a refused start opened the socket")
			}
		})
	}
}

// ownFile is a state file the agent wrote, with a few records in it.
func ownFile(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	db, err := persist.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := db.SetDataplane(fmt.Sprintf("dataplane-%d-%s", i, strings.Repeat("x", 500))); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	b, err := os.ReadFile(filepath.Join(dir, persist.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// failedFile is a state file whose commit fails when failed is closed.
type failedFile struct{ failed chan struct{} }

func (f failedFile) Failed() <-chan struct{} { return f.failed }
func (f failedFile) Err() error {
	select {
	case <-f.failed:
		return fmt.Errorf("commit to state file state.db: %w: input/output error", persist.ErrCommitFailed)
	default:
		return nil
	}
}

// TestFailedCommitStopsTheAgent: a serving agent stops, with the state
// file's error, once a commit has failed; until then it serves.
func TestFailedCommitStopsTheAgent(t *testing.T) {
	f := failedFile{failed: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- serveUntilStopped(context.Background(), make(chan error), f, slog.New(slog.DiscardHandler))
	}()
	select {
	case err := <-done:
		t.Fatalf("stopped before any failure: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.failed)
	select {
	case err := <-done:
		if !errors.Is(err, persist.ErrCommitFailed) {
			t.Fatalf("stopped with %v, want ErrCommitFailed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still serving after a failed commit")
	}
}

// TestFailedCommitEndsAStartUpWait: a start-up wait (the NodeIPAM's, which
// writes blocks) ends with the state file's error once a commit fails,
// rather than wait for writes that will never come.
func TestFailedCommitEndsAStartUpWait(t *testing.T) {
	f := failedFile{failed: make(chan struct{})}
	wait := untilFailed(f, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	done := make(chan error, 1)
	go func() { done <- wait(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("wait ended before any failure: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.failed)
	select {
	case err := <-done:
		if !errors.Is(err, persist.ErrCommitFailed) {
			t.Fatalf("wait ended with %v, want ErrCommitFailed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after a failed commit")
	}
}
